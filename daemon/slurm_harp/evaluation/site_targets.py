"""What `harp report` reads from each job's tag beyond the time rows: the limit each mode would have
set for a target (planned_limit, the policy applied to a shadow value as the daemon applies it), and
rewrite mode's figures on memory and CPUs (the other modes change only the time limit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.request import Target
from slurm_harp.core.tag import Tag
from slurm_harp.evaluation.costs import assess, effective_limits, newly_killed
from slurm_harp.evaluation.observed import Observed, observe
from slurm_harp.evaluation.outcomes import TARGET_OF_KEY

# A job whose CPUs harp cut that used at least this share of those it kept is at harp's limit: it
# cannot use more than it holds, so whether it would have is unknown (possibly slowed).
AT_LIMIT = 0.9


@dataclass(frozen=True)
class TargetRow:
    """Rewrite mode on memory or CPUs (the other modes change only the time limit)."""

    target: Target
    jobs: int
    lowered_pct: float
    waste_cut_pct: float  # memory: MB-hours; CPUs: allocated but idle core-hours
    harmed_pct: float  # memory: killed out of memory (would be, plus harp's real kills); CPUs: slowed
    at_limit_pct: float | None = None  # CPUs: at harp's cut, possibly slowed (at_harps_cpu_limit)


def planned_limit(job: JobRecord, tag: Tag, key: str, mode: Mode, policy: Policy) -> float:
    """The limit ``mode`` would have given ``job`` (as submitted) for the target of ``key``; NaN
    keeps the request."""
    value = tag.values.get(key)
    if value is None:
        return math.nan
    if tag.flags.get(key):  # harp changed it: the value is the limit it set
        return float(value)
    if key in tag.kept:  # a changing mode would have kept the request
        return math.nan
    seen_in = Mode(tag.mode)
    if seen_in.changes_limits and (key == "t" or not seen_in.needs_guard):
        return math.nan  # harp could have changed it and chose not to (no gain, cold user, ...)
    decided = policy.decide(TARGET_OF_KEY[key], job.request, mode, float(value), None, "")
    return math.nan if decided.new_value is None else float(decided.new_value)


def mode_limits(jobs: list[JobRecord], tags: list[Tag], key: str, mode: Mode, policy: Policy) -> np.ndarray:
    """planned_limit of each of ``jobs`` (as submitted, ``tags`` theirs); NaN everywhere in shadow."""
    if mode is Mode.SHADOW:
        return np.full(len(jobs), math.nan)
    return np.array([planned_limit(j, t, key, mode, policy) for j, t in zip(jobs, tags, strict=True)])


def other_targets(jobs: list[JobRecord], tags: list[Tag], policy: Policy) -> list[TargetRow]:
    """Rewrite mode's row for memory and for CPUs, over the jobs (as submitted) with such a value."""
    rows = []
    for key, target in (("m", Target.MEMORY), ("c", Target.CPUS)):
        have = [i for i, t in enumerate(tags) if key in t.values]
        if not have:
            continue
        sub_jobs, sub_tags = [jobs[i] for i in have], [tags[i] for i in have]
        obs = observe(sub_jobs, target, sub_tags)
        limits = mode_limits(sub_jobs, sub_tags, key, Mode.REWRITE, policy)
        figures = assess(obs, limits)
        n = int(figures["n"] or 0)
        if n == 0:
            continue
        cut = figures["alloc_core_h_cut_pct" if target is Target.CPUS else "waste_cut_pct"]
        at_limit = None
        if target is Target.MEMORY:  # out of memory: would be, and as harp's memory limit did stop
            sub = obs.take(obs.usable())
            new, stopped = rewrite_kills(sub, effective_limits(sub, limits[obs.usable()]))
            harmed = 100.0 * float(np.mean(new | stopped))
        else:  # a job cannot use more CPUs than harp left it: never "slowed" by a cut it got
            harmed = _or_nan(figures["slowed_pct"])
            pairs = zip(sub_jobs, sub_tags, strict=True)
            at_limit = _share([at_harps_cpu_limit(j, t) for j, t in pairs], obs.usable(), n)
        rows.append(TargetRow(target, n, figures["lowered_pct"] or 0.0, _or_nan(cut), harmed, at_limit))
    return rows


def rewrite_kills(obs: Observed, effective: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per job of ``obs`` (time or memory), the jobs a rewrite to ``effective`` limits kills before
    their own limit, as two disjoint masks: (newly killed: they finished under their request; stopped:
    a limit of harp's did stop them, and a rewrite to it stops them again, whether or not they ran
    past it)."""
    stopped = obs.stopped_by_harp
    return newly_killed(obs, effective) & ~stopped, stopped


def _share(flags: list[bool], usable: np.ndarray, n: int) -> float:
    """% of the ``n`` usable jobs that ``flags`` marks."""
    return 100.0 * int(np.sum(np.array(flags, dtype=bool) & usable)) / n


def at_harps_cpu_limit(job: JobRecord, tag: Tag) -> bool:
    """Whether harp cut ``job``'s CPUs (``c!``) and it used at least AT_LIMIT of those it kept."""
    kept, used = tag.values.get("c"), job.used(Target.CPUS)
    if tag.flags.get("c") != "!" or not kept or used is None:
        return False
    return used >= AT_LIMIT * kept


def memory_ratios(jobs: list[JobRecord], tags: list[Tag]) -> np.ndarray:
    """Used / harp's value, per job with a memory value."""
    ratios = []
    for job, tag in zip(jobs, tags, strict=True):
        value, used = tag.values.get("m"), job.used(Target.MEMORY)
        if value and used is not None and used > 0:
            ratios.append(used / value)
    return np.array(ratios, dtype=float)


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
