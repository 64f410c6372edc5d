"""Study: variants of ours that were tried and not adopted, against the default, on the shared traces.

    .venv/bin/python -m tests.bench.study_method [--traces KTH,SDSC,CTC,LANL] [--target time]
        [--variants default,leaves63,min-child10,request-rungs,burst,request-history,scaled-rung,
         run-vs-request,stake-weights,net-objective]

`harp evaluate`'s protocol (60 / 20 / 20 chronological split, 1 % budget held in each of the four parts
of the validation window, refit when the test window opens). Variants:
- default: ours as shipped;
- leaves63 / min-child10: every booster with 63 leaves (LightGBM's default 31) / at least 10 jobs per
  leaf (20);
- request-rungs: the default models, with three more rungs at 0.5, 0.7 and 0.85 of the request;
- burst: four submission-burst features appended to every row (seconds since the same user+name's
  previous submission, the user's and the user+name's submissions in the past hour, the user's jobs
  submitted and not yet ended), all known at submit time;
- request-history: six columns appended to every row, the history of the same user AND the same
  requested time limit (jobs ended at or before the submit, within the 30-day horizon, as
  core/history.py's keys): log jobs, log last, median and max run, the fraction that hit a limit,
  and log(limit / max run). On SWF traces without job names the request is what tells a user's job
  types apart (the ceiling per user + name + request is far above the one per user);
- scaled-rung: the default rungs and one more, the chosen model at the smallest margin whose kill
  rate meets the budget in each of the rule's parts of the validation window (HARP's adjustment
  factor, held to our rule; it may lie below 1, which no default rung does);
- run-vs-request: every model learns the use against the request (time: log1p(run seconds) -
  log1p(limit minutes); memory and CPUs: log1p(use) - log1p(request)) instead of the use alone, and
  predicts it plus the request's feature column;
- stake-weights: every booster's training rows weighted by sqrt(CPUs x requested minutes), read off
  the request's own columns (mean 1): the rule weighs a saving by the job's CPUs, while the kill
  budget counts jobs, so the models' accuracy is tilted halfway towards the big jobs;
- net-objective: the default models and rungs, the penalty chosen for the largest cut net of what the
  kills lose: a newly killed job's waste on validation is its lost attempt (weight x limit) plus its
  waste when it runs again under its request, not zero (time and memory; CPUs kill nothing). The
  figures printed are the usual ones.
Prints, per variant, waste cut % / newly killed % (CPUs: slowed %) on validation and test, and the
largest test cut with at most 1 % killed as the rule's penalty sweeps (in hindsight, as the reports'
frontier table). docs/evaluation/tried.md quotes these figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest.mock import patch

import lightgbm as lgb
import numpy as np

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.evaluation.frontier import best_cut
from slurm_harp.evaluation.runner import evaluate_target
from slurm_harp.evaluation.split import Timeline
from slurm_harp.learning import booster, family, fitting
from slurm_harp.learning import calibration as cal
from slurm_harp.learning.family import FamilyConfig, Member
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.learning.strategy import HarpStrategy
from slurm_harp.learning.targets import TargetData
from slurm_harp.model.decision import Calibration, ladder_limits, one_rung_limits
from tests.bench.common import fitted_ours, shared_timeline, study_parser
from tests.bench.extra_columns import appended_columns, burst_columns, request_history_columns

BUDGET = cal.CalibrationConfig().kill_budget
REQUEST_MARGINS = (0.5, 0.7, 0.85)
Figures = tuple[float, float, float, float, float]  # validation cut, kill; test cut, kill; hindsight


def booster_variant(**params: int) -> MethodConfig:
    base = MethodConfig()
    family = replace(base.family, params=replace(base.family.params, **params))
    return replace(base, family=family)


def evaluated(timeline: Timeline, target: Target, config: MethodConfig) -> Figures:
    """Ours with ``config`` under `harp evaluate`'s protocol."""
    outcome = evaluate_target(timeline, target, [HarpStrategy(target, config=config)], BUDGET).outcomes[0]
    if outcome.error or outcome.validation is None or outcome.test is None:
        raise RuntimeError(f"ours failed: {outcome.error}")
    lost = "slowed_pct" if target is Target.CPUS else "newly_killed_pct"
    hindsight = best_cut(outcome.curve or [], 100 * BUDGET)
    return (
        float(outcome.validation["waste_cut_pct"] or 0.0),
        float(outcome.validation[lost] or 0.0),
        float(outcome.test["waste_cut_pct"] or 0.0),
        float(outcome.test[lost] or 0.0),
        math.nan if hindsight is None else hindsight,
    )


def figures_header(path: Path, target: Target) -> str:
    """The line above a trace's figures_line rows."""
    return f"{path.name}, {target.value}: validation / test, cut % / killed %; test ≤ 1 % in hindsight"


def figures_line(label: str, f: Figures) -> str:
    """One printed row of a study: ``label`` and its figures."""
    return (
        f"  {label:14} validation {f[0]:5.1f} / {f[1]:.2f}   test {f[2]:5.1f} / {f[3]:.2f}"
        f"   hindsight {f[4]:5.1f}"
    )


def request_rungs(timeline: Timeline, target: Target) -> Figures:
    """The default models, with rungs at fractions of the request beside theirs."""
    rungs, val, test = fitted_ours(timeline, target, BUDGET)
    rungs += [("request", m) for m in REQUEST_MARGINS]
    val_preds = dict(val.predictions, request=val.td.requested)
    test_preds = dict(test.predictions, request=test.td.requested)
    return scored(rungs, val_preds, val.td, test_preds, test.td)


def smallest_margin(predicted: np.ndarray, td: TargetData, config: cal.CalibrationConfig) -> float | None:
    """The smallest margin (bisection in log space, 0.05 to 100) whose limits kill at most the
    budget in each of the rule's ``chunks`` parts of the usable rows; None when 100 does not."""
    with np.errstate(invalid="ignore"):
        usable = np.flatnonzero((td.requested > 0) & (td.value > 0))
    parts = np.array_split(usable, max(1, config.chunks))

    def meets(margin: float) -> bool:
        limits = one_rung_limits(predicted, margin, config.floor, td.requested)
        return all(cal.assess(limits[p], td.take(p))[0] <= 100 * config.kill_budget for p in parts)

    low, high = 0.05, 100.0
    if not meets(high):
        return None
    for _ in range(40):
        middle = math.sqrt(low * high)
        low, high = (low, middle) if meets(middle) else (middle, high)
    return high


def scaled_rung(timeline: Timeline, target: Target) -> Figures:
    """The default models and rungs, and the chosen model at its smallest_margin."""
    rungs, val, test = fitted_ours(timeline, target, BUDGET)
    top = max(MethodConfig().point_margins)
    chosen = next(name for name, m in rungs if m == top)  # only the chosen model has the point margins
    margin = smallest_margin(val.predictions[chosen], val.td, cal.CalibrationConfig(kill_budget=BUDGET))
    rungs += [] if margin is None else [(chosen, margin)]
    return scored(rungs, val.predictions, val.td, test.predictions, test.td)


def scored(
    rungs: list[tuple[str, float]],
    val_preds: dict[str, np.ndarray],
    val: TargetData,
    test_preds: dict[str, np.ndarray],
    test: TargetData,
) -> Figures:
    """The rule calibrated on the validation predictions, scored on the test window's."""
    rule, figures = cal.calibrate(val_preds, val, rungs, cal.CalibrationConfig(kill_budget=BUDGET))
    limits = ladder_limits(test_preds, test.requested, test.weight, rule, test.group)
    kill, cut = cal.assess(limits if rule.rungs else np.full(len(test), np.nan), test)
    hindsight = best_cut(cal.frontier(test_preds, test, rule), 100 * BUDGET) if rule.rungs else 0.0
    # calibrate() names the CPUs' slowed rate newly_killed_pct too
    return figures["waste_cut_pct"], figures["newly_killed_pct"], cut, kill, hindsight or math.nan


def with_bursts(timeline: Timeline, target: Target) -> Figures:
    with appended_columns(burst_columns):
        return evaluated(timeline, target, MethodConfig())


def with_request_history(timeline: Timeline, target: Target) -> Figures:
    with appended_columns(request_history_columns):
        return evaluated(timeline, target, MethodConfig())


# The request's own column for each target, in model space's log1p (time: of minutes).
REQUEST_COLUMN = {
    Target.TIME: "log_time_limit_min",
    Target.MEMORY: "log_mem_per_node_mb",
    Target.CPUS: "log_cpus",
}


def request_column(x: np.ndarray, target: Target) -> np.ndarray:
    """``target``'s request column of feature rows, 0 where there is no request."""
    column = x[:, FEATURE_NAMES.index(REQUEST_COLUMN[target])].astype(np.float64)
    out: np.ndarray = np.where(np.isfinite(column), column, 0.0)
    return out


@dataclass(frozen=True)
class AgainstRequest(Member):
    """A member that learned the use against the request: its prediction plus request_column."""

    target: Target = Target.TIME

    def predict(self, x: np.ndarray) -> np.ndarray:
        out: np.ndarray = super().predict(x) + request_column(x, self.target)
        return out


def run_vs_request(timeline: Timeline, target: Target) -> Figures:
    """Ours with every fit (learning.fitting's fit_family: the first fit and the refit) on the use
    against the request."""
    plain = family.fit_family  # what learning.fitting imported

    def fit(x: np.ndarray, y: np.ndarray, c: np.ndarray, cost: np.ndarray, f: FamilyConfig) -> list[Member]:
        members = plain(x, y - request_column(x, target), c, cost, f)
        return [AgainstRequest(m.name, m.kind, m.quantile, m.model, target) for m in members]

    with patch.object(fitting, "fit_family", fit):  # a study's hook into a private import
        return evaluated(timeline, target, MethodConfig())


def stake_weight(x: np.ndarray) -> np.ndarray:
    """sqrt(CPUs x requested minutes) of feature rows (1 each where not given), scaled to mean 1."""
    cpus, minutes = (
        np.expm1(np.nan_to_num(x[:, FEATURE_NAMES.index(name)].astype(np.float64), nan=0.0)).clip(1.0, None)
        for name in ("log_cpus", "log_time_limit_min")
    )
    weight = np.sqrt(cpus * minutes)
    out: np.ndarray = weight / weight.mean()
    return out


def stake_weights(timeline: Timeline, target: Target) -> Figures:
    """Ours with every booster's rows weighted by ``stake_weight`` (both fits)."""
    plain = booster.TrainingSet._binned

    def binned(self: booster.TrainingSet) -> lgb.Dataset:
        data = plain(self)
        data.set_weight(stake_weight(self._x))  # a study's hook into the rows a set holds
        return data

    with patch.object(booster.TrainingSet, "_binned", binned):
        return evaluated(timeline, target, MethodConfig())


def net_objective(timeline: Timeline, target: Target) -> Figures:
    """Ours with the penalty chosen on the validation cut net of the kills' lost attempts; the
    figures (and the curve read in hindsight) are the usual ones."""
    plain_outcomes, plain_calibrate = cal._outcomes, cal.calibrate  # what learning.fitting imported

    def outcomes(td: TargetData, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        killed, waste = plain_outcomes(td, limit)
        if td.target is Target.CPUS:
            return killed, waste
        return killed, np.where(killed, cal._kill_loss(td, limit), waste)

    # Under the hook the calibration's own net_cut_pct counts the kills twice: not read here.
    def calibrate(*args: Any) -> tuple[Calibration, dict[str, float]]:
        with patch.object(cal, "_outcomes", outcomes):  # a study's hook into the calibration's costs
            return plain_calibrate(*args)

    with patch.object(fitting, "calibrate", calibrate):
        return evaluated(timeline, target, MethodConfig())


VARIANTS: dict[str, Callable[[Timeline, Target], Figures]] = {
    "default": lambda tl, t: evaluated(tl, t, MethodConfig()),
    "leaves63": lambda tl, t: evaluated(tl, t, booster_variant(num_leaves=63)),
    "min-child10": lambda tl, t: evaluated(tl, t, booster_variant(min_child_samples=10)),
    "request-rungs": request_rungs,
    "burst": with_bursts,
    "request-history": with_request_history,
    "scaled-rung": scaled_rung,
    "run-vs-request": run_vs_request,
    "stake-weights": stake_weights,
    "net-objective": net_objective,
}


def main() -> None:
    parser = study_parser(__doc__ or "", "KTH,SDSC,CTC,LANL")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = args.variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    target = Target(args.target)
    for trace in args.traces.split(","):
        path, timeline = shared_timeline(trace)
        print(figures_header(path, target))
        for name in names:
            print(figures_line(name, VARIANTS[name](timeline, target)), flush=True)


if __name__ == "__main__":
    main()
