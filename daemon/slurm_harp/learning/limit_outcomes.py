"""What limits do to a window's jobs, as training scores them (calibration, promotion).

The definitions follow the evaluation's (evaluation.costs; learning notes): a job is usable with a
positive request and outcome; it is newly killed when its limit is below what it used and it had
finished under its own request (CPUs: "slowed" whenever the limit is below the use); waste is
Σ waste_weight x (limit - use) over the finished jobs that survive (CPUs: over all jobs,
max(limit - use, 0)), and its cut is core.accuracy.cut_pct's.
"""

from __future__ import annotations

import numpy as np

from slurm_harp.core.accuracy import cut_pct
from slurm_harp.core.request import Target
from slurm_harp.learning.targets import TargetData


def usable(td: TargetData) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        mask: np.ndarray = (td.requested > 0) & (td.value > 0)
    return mask


def _stopped(td: TargetData) -> np.ndarray:
    """Censored jobs, except those harp's own limit stopped: they ran at least ``value`` and any
    limit below that kills them too."""
    out: np.ndarray = td.censored if td.stopped_by_harp is None else td.censored & ~td.stopped_by_harp
    return out


def finished(td: TargetData) -> np.ndarray:
    """The usable jobs whose waste a limit can cut (base waste under the request): those that
    finished under their request (not stopped at a limit of their own); for CPUs every usable job.
    Calibration learns nothing from a window without them."""
    use = usable(td)
    if td.target is Target.CPUS:
        return use
    with np.errstate(invalid="ignore"):
        mask: np.ndarray = use & ~_stopped(td) & (td.value <= td.requested)
    return mask


def outcomes(td: TargetData, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(newly killed, waste) per job for limits (rows of ``td``, any shape broadcasting on axis 0)."""
    req, use = td.requested[:, None], td.value[:, None]
    w = td.waste_weight[:, None]
    killed_any = limit < np.minimum(use, req)
    if td.target is Target.CPUS:
        return killed_any, w * np.maximum(limit - use, 0.0)
    done = (~_stopped(td)[:, None]) & (use <= req)
    waste = np.where(done & ~killed_any, w * (limit - use), 0.0)
    return killed_any & done, waste


def assess(limits: np.ndarray, td: TargetData) -> tuple[float, float]:
    """(newly killed %, waste cut %) of ``limits`` (NaN = keep the request) over usable rows: the
    figures evaluation.costs.assess gives the same window under these definitions. The cut is NaN
    when the window has no waste to cut."""
    use = usable(td)
    sub = td.take(np.flatnonzero(use))
    eff = np.where(np.isnan(limits[use]), sub.requested, np.minimum(limits[use], sub.requested))
    killed, waste = outcomes(sub, eff[:, None])
    _, base = outcomes(sub, sub.requested[:, None])
    kill = 100.0 * float(killed.mean()) if killed.size else 0.0
    return kill, cut_pct(float(base.sum()), float(waste.sum()))
