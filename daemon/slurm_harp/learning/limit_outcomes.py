"""What limits do to a window's jobs, as training scores them (calibration, promotion).

The definitions are the evaluation's (evaluation.costs; learning notes): a job is usable with a
positive request and outcome; it is newly killed when its limit is below what it used and it had
finished under its own request (core.accuracy.finished_under_request, which both read: a job a
limit of harp's stopped counts as finished) (CPUs: "slowed" whenever the limit is below the use); waste is
Σ waste_weight x (limit - use) over the finished jobs that survive (CPUs: over all jobs,
max(limit - use, 0)), and its cut is core.accuracy.cut_pct's.
"""

from __future__ import annotations

import numpy as np

from slurm_harp.core.accuracy import cut_pct, finished_under_request
from slurm_harp.core.request import Target
from slurm_harp.learning.targets import TargetData


def usable(td: TargetData) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        mask: np.ndarray = (td.requested > 0) & (td.value > 0)
    return mask


def finished(td: TargetData) -> np.ndarray:
    """The usable jobs whose waste a limit can cut (base waste under the request): those that
    finished under their request (not stopped at a limit of their own); for CPUs every usable job.
    Calibration learns nothing from a window without them."""
    use = usable(td)
    if td.target is Target.CPUS:
        return use
    mask: np.ndarray = use & finished_under_request(td.value, td.requested, td.censored, td.stopped_by_harp)
    return mask


def outcomes(td: TargetData, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(newly killed, waste) per job for limits (rows of ``td``, any shape broadcasting on axis 0)."""
    req, use = td.requested[:, None], td.value[:, None]
    w = td.waste_weight[:, None]
    killed_any = limit < np.minimum(use, req)
    if td.target is Target.CPUS:
        return killed_any, w * np.maximum(limit - use, 0.0)
    by_harp = None if td.stopped_by_harp is None else td.stopped_by_harp[:, None]
    done = finished_under_request(use, req, td.censored[:, None], by_harp)
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
