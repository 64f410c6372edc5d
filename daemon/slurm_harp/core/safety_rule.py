"""The calibrated safety rule: per-job predictions -> a new limit, or None (keep the request).

The rule ("ladder-v1") chooses, job by job, among a few candidate limits ("rungs"). A rung is a
published model and a margin (at most MAX_MARGIN): its limit is ``ceil(margin x prediction)``,
raised to the floor and capped at the request (the request where the product is past a float's
range). Each rung carries its risk: the fraction of validation jobs it would have newly killed had
it been applied to every job. For one job the rule takes the rung with the
largest value

    weight x (request - limit)  -  penalty x risk

and rewrites only when that value is positive. ``weight`` turns a saved unit into what the site
saves (time: the job's cores, so the saving is core-minutes); ``penalty`` is the price of one
expected newly killed job in the same currency, chosen on the validation window so that the
kill budget holds there. So a job is lowered only where its upper quantiles sit far enough below
its request for the saving to pay for the risk: rewriting only where the model is confident,
with confidence measured per job by the spread of its quantiles against its request and size.

Optionally the risks are per partition (``by = "partition"``, Mondrian style): a partition with
enough validation jobs carries its own risk for each rung, measured on its jobs alone, and a job
in it is priced with those; any other job with the rung's risk over the whole window. A job for
several partitions ("a,b") is priced, per rung, with the largest risk of those it lists.

Training (learning/calibration.py) calls ``ladder_limits`` on whole windows; the daemon calls
``decide_limit`` on one job. Both give the same limits (tested). Numpy only: this runs in the
daemon, which has no training libraries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slurm_harp.core.request import JobRequest, Target

RULE = "ladder-v1"
BY = ("none", "partition")  # what a calibration's risks may be split by ("none": one risk per rung)
# A partition's own risks need this many validation jobs: at 200, one kill more or less moves a
# rung's risk by half a point of a 1 % budget. Training's default (CalibrationConfig).
MIN_GROUP_JOBS = 200
# The largest margin a card may give a rung. Training's are 1 to 3 (learning.fitting.MethodConfig)
# and experiments went to 3; a thousand times a prediction is no limit anyone calibrates, and a
# margin past a float's range made every limit infinite. card.schema.json holds the same bound.
MAX_MARGIN = 1000.0


@dataclass(frozen=True, slots=True)
class Rung:
    model: str  # a model name in the card ("q0.90", "huber", ...)
    margin: float  # limit = margin x the model's prediction (target unit)
    risk: float  # validation fraction newly killed by this rung alone, in [0, 1]


@dataclass(frozen=True, slots=True)
class Calibration:
    """What the card's "calibration" object holds, parsed. ``floor`` is in the target's unit."""

    rungs: tuple[Rung, ...]
    penalty: float
    floor: float
    target: Target
    by: str = "none"  # one of BY
    # Per group (partition name), each rung's risk in rung order; other jobs use Rung.risk.
    group_risks: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # Each rung's Rung.risk, read on every decision: made once.
    _risks: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_risks", tuple(r.risk for r in self.rungs))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": RULE,
            "target": self.target.value,
            "penalty": self.penalty,
            "floor": self.floor,
            "rungs": [{"model": r.model, "margin": r.margin, "risk": r.risk} for r in self.rungs],
        }
        if self.by != "none":  # absent otherwise: such a card reads as before in earlier versions
            out |= {"by": self.by, "group_risks": {g: list(r) for g, r in self.group_risks.items()}}
        return out

    def risks(self, group: str | None = None) -> tuple[float, ...]:
        """Each rung's risk for a job of ``group`` (its partition; None or unknown: the window's).
        A job for several partitions ("gpu,cpu", as the plugin sends ``-p gpu,cpu``) may run in
        any of them: per rung, the largest risk over the partitions listed (the window's for one
        without risks of its own)."""
        if group is None or not self.group_risks:
            return self._risks
        own = self.group_risks.get(group)
        if own is not None or "," not in group:
            return own if own is not None else self._risks
        listed = [self.group_risks.get(p.strip(), self._risks) for p in group.split(",") if p.strip()]
        return tuple(max(r) for r in zip(*listed, strict=True)) if listed else self._risks

    def risk_matrix(self, groups: Sequence[str] | np.ndarray | None, n: int) -> np.ndarray:
        """(n, rungs) risks of n jobs whose groups are ``groups`` (None: all the window's), each
        row ``risks`` of its job's group."""
        base = np.array([r.risk for r in self.rungs], dtype=np.float64).reshape(1, -1)
        out: np.ndarray = np.repeat(base, n, axis=0)
        if groups is not None and self.group_risks:
            picked = np.asarray(groups, dtype=object)
            for group in {g for g in picked.tolist() if isinstance(g, str)}:
                if group in self.group_risks or "," in group:
                    out[picked == group] = self.risks(group)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """Parse and check a card's calibration; ValueError names what is wrong."""
        if data.get("rule") != RULE:
            raise ValueError(f"calibration rule {data.get('rule')!r}, this version applies {RULE!r}")
        try:
            target = Target(str(data.get("target")))
            penalty, floor = float(data["penalty"]), float(data["floor"])
            rungs = tuple(Rung(str(r["model"]), float(r["margin"]), float(r["risk"])) for r in data["rungs"])
            by = str(data.get("by", "none"))
            split = dict(data.get("group_risks", {}))
            groups = {str(g): tuple(float(v) for v in r) for g, r in split.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad calibration: {exc!r}") from None
        if not (math.isfinite(penalty) and penalty >= 0 and math.isfinite(floor) and floor >= 0):
            raise ValueError(f"bad calibration: penalty {penalty}, floor {floor}")
        for r in rungs:
            if not (math.isfinite(r.margin) and r.margin > 0 and 0.0 <= r.risk <= 1.0):
                raise ValueError(f"bad calibration rung {r}")
            if r.margin > MAX_MARGIN:
                too_large = f"margin {r.margin:g} above {MAX_MARGIN:g}, no rule training makes"
                raise ValueError(f"bad calibration rung {r}: {too_large}")
        if by not in BY or (groups and by == "none"):
            raise ValueError(f"bad calibration: risks split by {by!r}, this version knows {BY}")
        for group, risks in groups.items():
            if len(risks) != len(rungs) or not all(0.0 <= v <= 1.0 for v in risks):
                raise ValueError(f"bad calibration: group {group!r} risks {risks} for {len(rungs)} rungs")
        return cls(rungs=rungs, penalty=penalty, floor=floor, target=target, by=by, group_risks=groups)

    @property
    def models(self) -> tuple[str, ...]:
        """The model names the rule reads, each once, in rung order."""
        return tuple(dict.fromkeys(r.model for r in self.rungs))


def decision_weight(target: Target, request: JobRequest, per_processor: bool = False) -> float:
    """What one saved unit of ``target`` is worth for this job, known at submit time.

    Time: the job's CPUs (a saved minute is a saved core-minute). Memory: the nodes the limit
    applies to times the requested hours (MB held for that long); a missing node count is one
    node, as JobRequest.requested reads the request (sbatch without -N sends none, and accounting
    records ReqNodes=1 for such a job). ``per_processor``: a trace record whose memory is per
    processor (core.job.JobRecord.per_processor_memory, training only): the CPUs instead of the
    nodes. CPUs: the requested hours. Unknown counts are 1. The hours are those of the limit the
    job runs under: without ``--time``, its partition's default, as accounting records it for
    training (JobRequest.effective_time_limit_minutes).
    """
    cpus = float(max(request.min_cpus or 1, 1))
    if target is Target.TIME:
        return cpus
    limit = request.effective_time_limit_minutes
    hours = limit / 60.0 if limit else 1.0
    if target is Target.MEMORY:
        return (cpus if per_processor else float(max(request.min_nodes or 1, 1))) * hours
    return hours


def decide_limit(
    predictions: Mapping[str, float],
    request: float | None,
    weight: float,
    calibration: Calibration,
    group: str | None = None,
) -> float | None:
    """One job's new limit in the target's unit, or None to keep the request.

    ``predictions``: each model's prediction for the job in the target's unit (a missing or
    non-finite one disables its rungs); ``request``: the user's value (None or <= 0: keep it,
    the rule never raises or invents a limit); ``weight``: ``decision_weight`` of the job;
    ``group``: its partition (read when the risks are per partition).
    The returned limit is a whole number in [floor, request) when not None.
    """
    if request is None or not request > 0:
        return None
    best_value, best_limit = 0.0, None
    for rung, risk in zip(calibration.rungs, calibration.risks(group), strict=True):
        predicted = predictions.get(rung.model)
        if predicted is None or not math.isfinite(predicted):
            continue
        limit = rung_limit(rung.margin, predicted, calibration.floor, request)
        value = weight * (request - limit) - calibration.penalty * risk
        # Ties go to the higher (safer) limit.
        if value > best_value or (best_limit is not None and value == best_value and limit > best_limit):
            best_value, best_limit = value, float(limit)
    return best_limit if best_limit is not None and best_limit < request else None


def rung_limit(margin: float, predicted: float, floor: float, request: float) -> float:
    """One rung's limit for one job with a finite prediction: ``ceil(margin x prediction)``, at
    least ``floor``, at most ``request``. A product past a float's range is the request: no limit
    comes of it (math.ceil raises on it), as one_rung_limits gives for arrays."""
    scaled = margin * max(predicted, 0.0)
    if not math.isfinite(scaled):
        return float(request)
    return float(min(request, max(floor, math.ceil(scaled))))


def viable_models(
    request: float | None, weight: float, calibration: Calibration, group: str | None = None
) -> tuple[str, ...]:
    """The models whose rungs could win for this job: a rung's value is at most
    ``weight x (request - floor) - penalty x risk``, so where that is not positive its model
    need not run (decide_limit gives the same answer without it). Small jobs run none."""
    if request is None or not request > 0:
        return ()
    best_saving = weight * (request - calibration.floor)
    pairs = zip(calibration.rungs, calibration.risks(group), strict=True)
    names = (r.model for r, risk in pairs if best_saving - calibration.penalty * risk > 0)
    return tuple(dict.fromkeys(names))


def one_rung_limits(predicted: np.ndarray, margin: float, floor: float, request: np.ndarray) -> np.ndarray:
    """One rung's limits for many jobs: ``ceil(margin x prediction)``, at least ``floor``, at most
    the request (decide_limit's formula, for arrays; a product past a float's range is the request)."""
    with np.errstate(over="ignore"):  # inf, whose limit is the request: no warning per window
        scaled = margin * np.maximum(predicted, 0.0)
    out: np.ndarray = np.minimum(request, np.maximum(floor, np.ceil(scaled)))
    return out


def ladder_limits(
    predictions: Mapping[str, np.ndarray],
    request: np.ndarray,
    weight: np.ndarray,
    calibration: Calibration,
    groups: Sequence[str] | np.ndarray | None = None,
) -> np.ndarray:
    """``decide_limit`` for many jobs at once (``groups``: their partitions): float array, NaN
    where the request is kept."""
    request = np.asarray(request, dtype=np.float64)
    best_value = np.zeros(request.shape)
    best_limit = np.full(request.shape, np.nan)
    risks = calibration.risk_matrix(groups, request.shape[0])
    with np.errstate(invalid="ignore"):
        for i, rung in enumerate(calibration.rungs):
            predicted = np.asarray(predictions[rung.model], dtype=np.float64)
            limit = one_rung_limits(predicted, rung.margin, calibration.floor, request)
            value = weight * (request - limit) - calibration.penalty * risks[:, i]
            ok = np.isfinite(value)
            better = ok & (
                (value > best_value) | ((value == best_value) & (limit > best_limit) & ~np.isnan(best_limit))
            )
            best_value = np.where(better, value, best_value)
            best_limit = np.where(better, limit, best_limit)
        keep = ~(request > 0) | ~(best_limit < request)
    best_limit[keep] = np.nan
    return best_limit
