"""What new limits would have cost and saved, per target, on jobs whose outcome is known.

A strategy's limit becomes the job's effective limit: NaN keeps the request, anything else is
rounded up to a whole unit, raised to Slurm's floor and capped at the request (a rewrite only
lowers). Then, with r the observed usage and q the request:
- newly killed: limit < r <= q for a job that finished under its own request (learning.md's
  definition: it would have finished, now it does not). A censored job (it hit its request; its
  true usage is at least r) that gets a lower limit is killed earlier than before, not newly:
  it is reported apart as censored_lowered_pct, and its earlier kills do count in re-execution.
  A job stopped at a limit harp set below its request (a site's own jobs: Observed.stopped_by_harp)
  counts as finished, as training counts it (core.accuracy.finished_under_request): it would have
  run on under its own request, and a limit below the run it reached newly kills it.
  For CPUs nothing is killed: a job given fewer CPUs than it used is slowed ("slowed %").
- reservation waste: time Σ cores·(limit - r) in core-hours (cores: those the user asked for),
  memory Σ units·(limit - r)·run hours in MB-hours, over jobs that finished under their request
  and still finish under the new limit (the killed ones cost re-execution instead). CPUs:
  Σ (max(limit, r) - r)·run hours, a slowed job stretching so that it uses the same core-hours
  (perfect scaling).
- the cut without kills: the same waste cut with every newly killed job keeping its request's
  waste. The cut above counts a killed job's waste as gone (it no longer finishes), so part of
  it is bought by killing; this one is what the jobs that still finish save.
- extend mode (time only): the same limits, but a job is extended by `harp guard`'s steps
  (core.extension) whenever it runs within the lead of its limit, never past its request; so
  nothing is newly killed, and what is left is the waste of the final limits and how many
  extensions the jobs needed. (In time_min mode only the jobs a backfill starts early run with a
  cut limit, so its extensions are at most these; `harp simulate` measures the schedule itself.)
- re-execution (HARP's model, advice.reexecution's policy): a killed job is re-run with double
  the limit until it finishes, the last attempt at the request (then it does what it did). A
  time-killed attempt costs cores x limit; an OOM-killed attempt costs cores x its whole run (the
  peak may come last: an upper bound). Reported in core-hours: the total and the extra over no
  rewriting. (advice.reexecution prices the same policy before the run, from a distribution.)
"""

from __future__ import annotations

import math

import numpy as np

from slurm_harp.advice.reexecution import next_limit
from slurm_harp.core import accuracy
from slurm_harp.core.accuracy import finished_under_request
from slurm_harp.core.extension import DEFAULT_LEAD_S, extensions_needed
from slurm_harp.core.request import Target
from slurm_harp.evaluation.observed import FLOOR, Observed

Figures = dict[str, float | None]


def effective_limits(obs: Observed, limits: np.ndarray) -> np.ndarray:
    """The limit each job would run under: request where NaN, else whole units in [floor, request]."""
    proposed = np.where(np.isnan(limits), obs.requested, np.ceil(np.maximum(limits, FLOOR[obs.target])))
    out: np.ndarray = np.minimum(proposed, obs.requested)
    return out


def killed(obs: Observed, effective: np.ndarray) -> np.ndarray:
    """Jobs killed earlier than under their request (time, memory; censored ones included) or
    slowed (CPUs)."""
    mask: np.ndarray = effective < np.minimum(obs.actual, obs.requested)
    return mask


def finished(obs: Observed) -> np.ndarray:
    """Jobs that finished under their own request (core.accuracy.finished_under_request)."""
    return finished_under_request(obs.actual, obs.requested, obs.censored, obs.stopped_by_harp)


def newly_killed(obs: Observed, effective: np.ndarray) -> np.ndarray:
    """Jobs that finished under their request and would not under ``effective`` (CPUs: slowed)."""
    if obs.target is Target.CPUS:
        return killed(obs, effective)
    mask: np.ndarray = killed(obs, effective) & finished(obs)
    return mask


def killed_fraction(obs: Observed, limits: np.ndarray) -> float:
    """Fraction of the usable jobs newly killed (slowed) by ``limits``; 0 when none is usable."""
    use = obs.usable()
    n = int(use.sum())
    if n == 0:
        return 0.0
    sub = obs.take(use)
    return float(np.sum(newly_killed(sub, effective_limits(sub, limits[use])))) / n


def _weight(obs: Observed) -> np.ndarray:
    """Per-job factor turning (limit - usage) into core-hours (time) or MB-hours (memory)."""
    if obs.target is Target.TIME:
        weight: np.ndarray = obs.cores / 60.0
    else:
        weight = obs.units * obs.run_hours
    return weight


def waste(obs: Observed, effective: np.ndarray) -> float:
    """Reservation waste under ``effective`` limits (see the module doc for the unit)."""
    if obs.target is Target.CPUS:
        return float(np.sum(waste_terms(obs, effective)))
    w = _weight(obs)
    survives = finished(obs) & (effective >= obs.actual)
    return float(np.sum((w * (effective - obs.actual))[survives]))


def reexecution(obs: Observed, effective: np.ndarray) -> tuple[float, float]:
    """HARP's re-execution cost in core-hours: (total, extra over running under the request)."""
    base = float(np.sum(obs.cores * obs.run_hours))
    if obs.target is Target.CPUS:
        return base, 0.0
    limit = effective.copy()
    need = np.minimum(obs.actual, obs.requested)
    active = limit < need
    extra = 0.0
    while active.any():
        if obs.target is Target.TIME:
            extra += float(np.sum(obs.cores[active] * limit[active])) / 60.0
        else:
            extra += float(np.sum(obs.cores[active] * obs.run_hours[active]))
        limit[active] = next_limit(limit[active], obs.requested[active])
        active &= limit < need
    return base + extra, extra


def extended(
    obs: Observed, effective: np.ndarray, lead_s: float = DEFAULT_LEAD_S
) -> tuple[np.ndarray, np.ndarray]:
    """Time only: (final limit, extensions) of each job run in extend mode under ``effective``."""
    finals = effective.copy()
    counts = np.zeros(len(obs), dtype=np.int64)
    for i in np.flatnonzero(effective < obs.requested):
        counts[i], finals[i] = extensions_needed(
            int(effective[i]), float(obs.actual[i]) * 60.0, int(obs.requested[i]), lead_s
        )
    return finals, counts


def waste_cut_pct(obs: Observed, limits: np.ndarray) -> float:
    """% of the request's reservation waste that ``limits`` cut, over the usable jobs."""
    sub = obs.take(obs.usable())
    lim = limits[obs.usable()]
    return accuracy.cut_pct(waste(sub, sub.requested), waste(sub, effective_limits(sub, lim)))


def assess(obs: Observed, limits: np.ndarray) -> Figures:
    """Every figure of the report for ``limits`` (aligned with ``obs``) over the usable jobs.

    Keys: n, lowered_pct, upp, up_mape, ov_mape, aea, waste_request, waste, waste_cut_pct,
    newly_killed_pct (jobs that finished under their request and would not any more),
    kill_free_cut_pct (the waste cut with newly killed jobs keeping their request's waste),
    censored_lowered_pct (censored jobs given a lower limit: killed earlier), reexec_core_h,
    reexec_extra_core_h (these three None for CPUs),
    slowed_pct and alloc_core_h_cut_pct (CPUs only; None otherwise).
    """
    use = obs.usable()
    sub = obs.take(use)
    eff = effective_limits(sub, limits[use])
    n = len(sub)
    lost = killed(sub, eff)
    before = waste(sub, sub.requested)
    after = waste(sub, eff)
    out: Figures = {
        "n": float(n),
        "lowered_pct": 100.0 * float(np.mean(eff < sub.requested)) if n else math.nan,
        "upp": accuracy.upp(eff, sub.actual),
        "up_mape": accuracy.up_mape(eff, sub.actual),
        "ov_mape": accuracy.ov_mape(eff, sub.actual),
        "aea": accuracy.aea(eff, sub.actual),
        "waste_request": before,
        "waste": after,
        "waste_cut_pct": accuracy.cut_pct(before, after),
        "newly_killed_pct": None,
        "kill_free_cut_pct": None,
        "censored_lowered_pct": None,
        "reexec_core_h": None,
        "reexec_extra_core_h": None,
        "slowed_pct": None,
        "alloc_core_h_cut_pct": None,
    }
    new = newly_killed(sub, eff)
    share = 100.0 * float(np.mean(new)) if n else math.nan
    if obs.target is Target.CPUS:
        used = sub.run_hours * sub.actual
        out["slowed_pct"] = share
        out["alloc_core_h_cut_pct"] = accuracy.cut_pct(
            float(np.sum(used + waste_terms(sub, sub.requested))), float(np.sum(used + waste_terms(sub, eff)))
        )
    else:
        total, extra = reexecution(sub, eff)
        out["newly_killed_pct"] = share
        out["kill_free_cut_pct"] = accuracy.cut_pct(before, waste(sub, np.where(new, sub.requested, eff)))
        out["censored_lowered_pct"] = 100.0 * float(np.mean(lost & ~finished(sub))) if n else math.nan
        out["reexec_core_h"] = total
        out["reexec_extra_core_h"] = extra
    if obs.target is Target.TIME:
        out |= _extend_figures(sub, eff, before)
    return out


def _extend_figures(obs: Observed, effective: np.ndarray, before: float) -> Figures:
    """The extend mode's keys: extend_waste_cut_pct, extend_killed_pct (0 by construction: shown
    because it is computed), extended_pct (jobs extended at least once), extensions_mean and
    extensions_max (per extended job)."""
    finals, counts = extended(obs, effective)
    n, many = len(obs), counts[counts > 0]
    return {
        "extend_waste_cut_pct": accuracy.cut_pct(before, waste(obs, finals)),
        "extend_killed_pct": 100.0 * float(np.mean(newly_killed(obs, finals))) if n else math.nan,
        "extended_pct": 100.0 * float(np.mean(counts > 0)) if n else math.nan,
        "extensions_mean": float(np.mean(many)) if len(many) else 0.0,
        "extensions_max": float(np.max(many)) if len(many) else 0.0,
    }


def waste_terms(obs: Observed, effective: np.ndarray) -> np.ndarray:
    """Per-job CPU waste in core-hours: the allocation a job holds beyond what it uses."""
    terms: np.ndarray = obs.run_hours * np.maximum(effective - obs.actual, 0.0)
    return terms
