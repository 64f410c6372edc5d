"""Calibrating the safety rule (core.safety_rule, "ladder-v1") on the validation window.

Given the validation predictions of a few models and candidate (model, margin) rungs:
1. each rung's risk is its conformal-style kill rate on validation: (k + 1) / (n + 1), k the jobs
   it alone would newly kill out of n usable jobs;
2. the penalty (price of one expected kill) sweeps a geometric grid; for each value the rule's
   limits are scored, and the penalty kept is the one with the largest waste cut whose kill rate
   stays within the budget in EACH of ``chunks`` consecutive parts of the window (robustness to
   drift: the test window comes later than validation, and kill rates wander over time). Among
   penalties that cut the same, the highest is kept: it prices risk most, so the rule is the
   safest of those that did as well on validation. When none cuts anything (the window's
   requests are at or below every prediction, or none of its jobs finished under its request),
   the rule never rewrites: penalty 0 would lower every later job to its cheapest rung unpriced.
3. a window of fewer usable jobs than ``jobs_needed(kill_budget)`` gives the rule that never
   rewrites too: no kill seen in n jobs bounds the kill rate only below about 3 / n (the rule of
   three, 95 %), so on fewer jobs "within the budget" would only mean "no kill seen".
With ``by = "partition"`` each rung's risk is also measured per partition (Mondrian style) for
partitions with at least ``min_group_jobs`` usable validation jobs; the penalty stays one.
What a limit does to a job (usable, newly killed, waste) is learning.limit_outcomes's; the waste
cut is core.accuracy.cut_pct's. For walltime the figures also give the cut net of the kills: a newly
killed job's waste is then its attempt cut short plus its waste when run again under its
request (one re-run, as the simulator has it: a lower bound on HARP's doubling re-execution),
and a rule whose net cut is not positive loses core-hours for the site (training warns).
Nothing here sees the test window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from slurm_harp.core.accuracy import cut_pct, kill_loss
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import BY, MIN_GROUP_JOBS, Calibration, Rung, one_rung_limits
from slurm_harp.learning.limit_outcomes import outcomes, usable
from slurm_harp.learning.targets import TargetData

Curve = list[tuple[float, float]]


@dataclass(frozen=True)
class CalibrationConfig:
    kill_budget: float = 0.01  # fraction of the window's usable jobs
    floor: float = 1.0  # no limit below this (target unit)
    # 4 parts: with 1 or 2, the test-window kill rate drifted over the budget
    # (experiments/tried.md#the-record).
    chunks: int = 4
    grid: int = 161
    by: str = "none"  # "partition": a risk per rung and partition (core.safety_rule.BY)
    min_group_jobs: int = MIN_GROUP_JOBS  # a partition with fewer uses the window's risks

    def __post_init__(self) -> None:
        if self.by not in BY:
            raise ValueError(f"calibration by {self.by!r}: one of {BY}")


@dataclass(frozen=True)
class _Scored:
    """Per-job, per-rung consequences on one window (usable jobs only)."""

    limit: np.ndarray  # (n, R) each rung's limit
    saving: np.ndarray  # (n, R) weight x (request - limit): what the rule believes it saves
    killed: np.ndarray  # (n, R) bool: newly killed under that rung
    waste: np.ndarray  # (n, R) waste under that rung
    base_waste: np.ndarray  # (n,) waste under the request
    risk: np.ndarray  # (R,): one per rung, as the rule serves it; (n, R) per job in studies


def rung_limits(
    predictions: Mapping[str, np.ndarray],
    rungs: Sequence[tuple[str, float]],
    requested: np.ndarray,
    floor: float,
) -> np.ndarray:
    """(n, R) limits of each rung alone, as core.safety_rule computes them."""
    cols = [one_rung_limits(predictions[name], m, floor, requested) for name, m in rungs]
    return np.stack(cols, axis=1) if cols else np.empty((len(requested), 0))


def _score(
    predictions: Mapping[str, np.ndarray], td: TargetData, rungs: Sequence[tuple[str, float]], floor: float
) -> _Scored:
    limits = rung_limits(predictions, rungs, td.requested, floor)
    killed, waste = outcomes(td, limits)
    _, base = outcomes(td, td.requested[:, None])
    risk = _conformal_risk(killed, np.isfinite(limits))
    saving = td.weight[:, None] * (td.requested[:, None] - limits)
    # A rung without a prediction for a job (NaN: e.g. no history yet) is never chosen for it.
    saving = np.where(np.isnan(saving), -np.inf, saving)
    return _Scored(limits, saving, killed, waste, base[:, 0], risk)


def _conformal_risk(killed: np.ndarray, applies: np.ndarray) -> np.ndarray:
    """(R,) each rung's risk over the jobs it applies to (it has a prediction for them), conformal
    style: (k + 1) / (n + 1), k of those n newly killed; ``killed``, ``applies``: (n, R) bool."""
    out: np.ndarray = (killed.sum(axis=0) + 1.0) / (applies.sum(axis=0) + 1.0)
    return out


def _group_risks(scored: _Scored, groups: np.ndarray, min_jobs: int) -> dict[str, tuple[float, ...]]:
    """Each rung's conformal risk on each named group's jobs alone, for groups with at least
    ``min_jobs`` jobs. Jobs whose partition is unknown ("": e.g. a trace without one) are never
    a group: a request without a partition is priced with the window's risks, so such jobs are
    calibrated with them too. (The plugin sends a job submitted without -p with its default
    partition, the one accounting records.)"""
    out: dict[str, tuple[float, ...]] = {}
    for group in sorted({str(g) for g in groups} - {""}):
        rows = groups == group
        if int(rows.sum()) < min_jobs:
            continue
        # A finite saving is a rung with a prediction for the job (see _score).
        risk = _conformal_risk(scored.killed[rows], np.isfinite(scored.saving[rows]))
        out[group] = tuple(float(v) for v in risk)
    return out


def _choose(scored: _Scored, penalty: float) -> np.ndarray:
    """Index of the rung each job gets under ``penalty``; -1 keeps the request."""
    n, r = scored.saving.shape
    if r == 0:
        return np.full(n, -1)
    value = scored.saving - penalty * scored.risk
    best = np.argmax(value, axis=1)
    out: np.ndarray = np.where(value[np.arange(n), best] > 0, best, -1)
    return out


def _kill_loss(td: TargetData, limit: np.ndarray) -> np.ndarray:
    """What newly killing a job under ``limit`` loses (rows of ``td``, any shape broadcasting on
    axis 0, as limit_outcomes.outcomes), core.accuracy.kill_loss times waste_weight: its attempt
    cut short plus its waste when it runs again under its request. The metric counts a killed
    job's waste as zero instead."""
    w, req, use = (v[:, None] for v in (td.waste_weight, td.requested, td.value))
    out: np.ndarray = w * kill_loss(limit, use, req)
    return out


def _net_cut(scored: _Scored, chosen: np.ndarray, td: TargetData) -> float:
    """Walltime: the waste cut of a choice net of what its kills lose (_kill_loss). ``td``: the
    scored rows."""
    rows = np.flatnonzero(chosen >= 0)
    killed = rows[scored.killed[rows, chosen[rows]]]
    lost = _kill_loss(td.take(killed), scored.limit[killed, chosen[killed]][:, None])
    _, after = _effect(scored, chosen)
    return cut_pct(float(scored.base_waste.sum()), after + float(lost.sum()))


def _effect(scored: _Scored, chosen: np.ndarray) -> tuple[np.ndarray, float]:
    """(newly killed per job, total waste) of a choice."""
    n = chosen.shape[0]
    rows = np.arange(n)
    pick = np.maximum(chosen, 0)
    if scored.killed.shape[1]:
        killed = np.where(chosen >= 0, scored.killed[rows, pick], False)
        waste = np.where(chosen >= 0, scored.waste[rows, pick], scored.base_waste)
    else:
        killed, waste = np.zeros(n, dtype=bool), scored.base_waste
    return killed, float(waste.sum())


def penalty_grid(td: TargetData, size: int) -> np.ndarray:
    """Zero, then geometric from far below to far above a typical job's value at stake."""
    use = usable(td)
    stake = td.weight[use] * td.requested[use]
    scale = float(np.median(stake)) if stake.size else 1.0
    return np.concatenate([[0.0], scale * np.geomspace(1e-2, 1e7, max(size - 1, 1))])


def _search(
    scored: _Scored, parts: Sequence[np.ndarray], budget: float, penalties: np.ndarray
) -> tuple[float, float, float, float] | None:
    """(waste cut %, penalty, kill %, worst part's kill %) at the penalty with the largest cut
    whose kill rate stays within ``budget`` in every one of ``parts``, the highest such penalty
    among equal cuts (``penalties`` ascending); None when none stays within the budget."""
    before = float(scored.base_waste.sum())
    best: tuple[float, float, float, float] | None = None
    for penalty in penalties:
        killed, after = _effect(scored, _choose(scored, penalty))
        worst = max((float(killed[p].mean()) for p in parts if p.size), default=0.0)
        if worst > budget:
            continue
        cut = cut_pct(before, after)
        if best is None or cut >= best[0]:  # a tie: the higher penalty, the safer rule
            best = (cut, float(penalty), 100.0 * float(killed.mean()) if killed.size else 0.0, 100.0 * worst)
    return best


def jobs_needed(kill_budget: float) -> float:
    """The usable jobs a rule must be judged on for no kill seen among them to show a kill rate
    within ``kill_budget`` (95 %, the rule of three); infinite for a budget of 0, which no count
    of jobs shows."""
    return math.ceil(3.0 / kill_budget - 1e-9) if kill_budget > 0 else math.inf


def calibrate(
    predictions: Mapping[str, np.ndarray],
    td: TargetData,
    rungs: Sequence[tuple[str, float]],
    config: CalibrationConfig,
) -> tuple[Calibration, dict[str, float]]:
    """The calibrated rule and its validation figures (kill %, waste cut %, penalty, ...).

    ``predictions`` (target unit) and ``td`` are rows of the validation window. Never rewriting
    always meets the budget; it is what comes back when nothing else does, and when nothing
    within the budget cuts any waste there, or when the window has too few usable jobs to show the
    budget met (jobs_needed)."""
    use = usable(td)
    sub = td.take(np.flatnonzero(use))
    preds = {name: np.asarray(p, dtype=np.float64)[use] for name, p in predictions.items()}
    scored = _score(preds, sub, rungs, config.floor)
    groups = _group_risks(scored, sub.group, config.min_group_jobs) if config.by != "none" else {}
    rule = Calibration(
        rungs=tuple(Rung(name, float(m), float(r)) for (name, m), r in zip(rungs, scored.risk, strict=True)),
        penalty=0.0,
        floor=config.floor,
        target=td.target,
        by=config.by,
        group_risks=groups,
    )
    if groups:
        scored = replace(scored, risk=rule.risk_matrix(sub.group, len(sub)))
    parts = np.array_split(np.arange(len(sub)), max(1, config.chunks))
    needed = jobs_needed(config.kill_budget)
    found = None
    if len(sub) >= needed:
        found = _search(scored, parts, config.kill_budget, penalty_grid(sub, config.grid))
    if found is None or not found[0] > 0:
        # Too few jobs to show the budget met, even the top of the grid kills too much, or no
        # penalty cuts anything on this window (or it has no waste to cut: a NaN cut): never
        # rewrite (a penalty of 0 would lower every later job to its cheapest rung). The rule
        # that never rewrites cuts nothing: its figures are 0.
        found = None
        calibration = Calibration(rungs=(), penalty=0.0, floor=config.floor, target=td.target)
        cut, penalty, kill, worst = 0.0, 0.0, 0.0, 0.0
    else:
        cut, penalty, kill, worst = found
        calibration = replace(rule, penalty=penalty)
    figures = {
        "kill_budget_pct": 100.0 * config.kill_budget,
        "newly_killed_pct": kill,
        "worst_part_killed_pct": worst,
        "waste_cut_pct": cut,
        "chunks": float(config.chunks),
        "jobs": float(len(sub)),
        "jobs_needed": float(needed),
        "groups": float(len(calibration.group_risks)),
    }
    if td.target is Target.TIME:
        figures["net_cut_pct"] = _net_cut(scored, _choose(scored, penalty), sub) if found is not None else 0.0
    return calibration, figures


def too_few(figures: Mapping[str, float]) -> str | None:
    """Why a rule never rewrites when its window had too few usable jobs to show the kill budget
    met (``jobs`` below ``jobs_needed``); None otherwise."""
    jobs, needed = figures.get("jobs", 0.0), figures.get("jobs_needed", 0.0)
    if not jobs < needed:
        return None
    budget = figures["kill_budget_pct"]
    if not math.isfinite(needed):
        return "the rule never rewrites: no number of validation jobs shows a kill budget of 0"
    return (
        f"the rule never rewrites: {jobs:.0f} usable validation jobs, {needed:.0f} needed to show "
        f"at most {budget:g} % newly killed (no kill in n jobs only bounds the rate below about "
        "3/n): every request is kept (served, jobs are only annotated)"
    )


def losing(figures: Mapping[str, float]) -> str | None:
    """What to tell the site when a calibrated walltime rule cuts waste on validation but loses
    core-hours net of its kills (``net_cut_pct`` not positive); None otherwise."""
    net = figures.get("net_cut_pct")
    if net is None or not figures.get("waste_cut_pct", 0.0) > 0 or net > 0:
        return None
    return (
        f"on validation the rule's kills cost more core-hours than its rewrites save (cut "
        f"{figures['waste_cut_pct']:.1f} %, {net:.1f} % net of the attempts they cut short and run "
        "again): rewriting would cost this site; keep it in shadow mode or lower the kill budget"
    )


def frontier(
    predictions: Mapping[str, np.ndarray],
    td: TargetData,
    calibration: Calibration,
    size: int = CalibrationConfig.grid,
) -> Curve:
    """(newly killed %, waste cut %) on a window as the penalty sweeps the grid calibration
    searches, rungs and risks fixed; the cut is NaN where the window has no waste to cut."""
    use = usable(td)
    sub = td.take(np.flatnonzero(use))
    preds = {name: np.asarray(p, dtype=np.float64)[use] for name, p in predictions.items()}
    pairs = [(r.model, r.margin) for r in calibration.rungs]
    scored = _score(preds, sub, pairs, calibration.floor)
    # The rule's risks are the calibrated ones, not this window's.
    scored = replace(scored, risk=calibration.risk_matrix(sub.group, len(sub)))
    before = float(scored.base_waste.sum())
    points: Curve = []
    for penalty in penalty_grid(sub, size):
        killed, after = _effect(scored, _choose(scored, penalty))
        points.append((100.0 * float(killed.mean()) if killed.size else 0.0, cut_pct(before, after)))
    return points
