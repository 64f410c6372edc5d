"""What a run is judged by, as the scheduling literature measures it.

The first ``warmup`` fraction of jobs (by submit time) are simulated but not measured. A job run
again after a kill is measured from its first submission to the end of its last attempt: its wait
includes the killed attempt, as the user lived it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from slurm_harp.simulation.engine import Result

TAU = 10.0  # seconds: the bound of bounded slowdown
WARMUP = 0.01
# Job-size classes (processors) for the slowdown breakdown: (label, smallest, largest).
SIZE_CLASSES = (("1", 1, 1), ("2-4", 2, 4), ("5-16", 5, 16), ("17-64", 17, 64), ("65-256", 65, 256))
WIDEST_CLASS = "257+"


def bounded_slowdown(
    wait: npt.NDArray[np.float64], run: npt.NDArray[np.float64], tau: float = TAU
) -> npt.NDArray[np.float64]:
    """max(1, (wait + run) / max(tau, run)) per job."""
    return np.maximum(1.0, (wait + run) / np.maximum(tau, run))


@dataclass(frozen=True)
class Metrics:
    jobs: int
    warmup_jobs: int
    mean_wait_s: float
    median_wait_s: float
    mean_bsld: float
    utilisation: float
    killed_early_jobs: int  # killed before their user's own limit
    lost_core_hours: float  # spent in those killed attempts
    rerun_core_hours: float  # spent running them again
    killed_at_request_jobs: int  # ran into their own request (as they did for real)
    extensions: int  # planned limits raised at expiry (corrections, or granted extensions)
    delaying_extensions: int  # of those, how many pushed back the first waiting job's reservation
    mean_delay_s: float  # by how much, on average over the delaying ones
    bsld_by_size: dict[str, tuple[int, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def measured(result: Result, warmup: float = WARMUP) -> npt.NDArray[np.int64]:
    """The indices of the jobs measured: all after the first ``warmup`` fraction."""
    n = len(result.workload)
    return np.arange(int(n * warmup), n)


def waits(result: Result, warmup: float = WARMUP) -> npt.NDArray[np.float64]:
    keep = measured(result, warmup)
    start = np.asarray(result.start, dtype=np.float64)[keep]
    return start - np.asarray(result.workload.submit, dtype=np.float64)[keep]


def measure(result: Result, warmup: float = WARMUP, tau: float = TAU) -> Metrics:
    w = result.workload
    keep = measured(result, warmup)
    submit = np.asarray(w.submit, dtype=np.float64)
    start = np.asarray(result.start, dtype=np.float64)
    end = np.asarray(result.end, dtype=np.float64)
    procs = np.asarray(w.procs, dtype=np.int64)
    wait = (start - submit)[keep]
    bsld = bounded_slowdown(wait, (end - start)[keep], tau)

    att = result.attempts
    a_job = np.asarray(att.job, dtype=np.int64)
    a_start = np.asarray(att.start, dtype=np.float64)
    a_end = np.asarray(att.end, dtype=np.float64)
    a_core = (a_end - a_start) * procs[a_job] if len(a_job) else np.zeros(0)
    first = int(keep[0]) if len(keep) else len(w)
    is_measured = a_job >= first
    early = np.asarray(att.killed_early, dtype=bool) & is_measured
    killed = np.asarray(att.killed, dtype=bool) & is_measured
    early_jobs = np.unique(a_job[early])
    final = np.isin(a_job, early_jobs) & ~np.asarray(att.killed_early, dtype=bool)
    at_request = killed & ~np.asarray(att.killed_early, dtype=bool)

    delays = result.extension_delays
    return Metrics(
        jobs=len(keep),
        warmup_jobs=len(w) - len(keep),
        mean_wait_s=_mean(wait),
        median_wait_s=float(np.median(wait)) if len(wait) else math.nan,
        mean_bsld=_mean(bsld),
        utilisation=utilisation(result, a_job, a_start, a_end, first),
        killed_early_jobs=len(early_jobs),
        lost_core_hours=float(a_core[early].sum()) / 3600,
        rerun_core_hours=float(a_core[final].sum()) / 3600,
        killed_at_request_jobs=int(at_request.sum()),
        extensions=result.extensions,
        delaying_extensions=len(delays),
        mean_delay_s=float(np.mean(delays)) if delays else 0.0,
        bsld_by_size=_by_size(procs[keep], bsld),
    )


def utilisation(
    result: Result,
    a_job: npt.NDArray[np.int64],
    a_start: npt.NDArray[np.float64],
    a_end: npt.NDArray[np.float64],
    first: int,
) -> float:
    """Processor-time used (every attempt, killed ones too) over the processors' time, from the
    first measured job's submission to the last submission (Tsafrir et al.'s window)."""
    w = result.workload
    if first >= len(w):
        return math.nan
    t0, t1 = w.submit[first], w.submit[-1]
    if t1 <= t0:
        return math.nan
    procs = np.asarray(w.procs, dtype=np.float64)[a_job]
    overlap = np.clip(np.minimum(a_end, t1) - np.maximum(a_start, t0), 0.0, None)
    return float((procs * overlap).sum() / (w.processors * (t1 - t0)))


def _by_size(procs: npt.NDArray[np.int64], bsld: npt.NDArray[np.float64]) -> dict[str, tuple[int, float]]:
    """Mean bounded slowdown per job-size class (classes with no job left out)."""
    labels = [c[0] for c in SIZE_CLASSES] + [WIDEST_CLASS]
    classes = np.searchsorted([c[2] for c in SIZE_CLASSES], procs)
    out: dict[str, tuple[int, float]] = {}
    for index, label in enumerate(labels):
        chosen = bsld[classes == index]
        if len(chosen):
            out[label] = (len(chosen), float(chosen.mean()))
    return out


def _mean(values: npt.NDArray[np.float64]) -> float:
    return float(values.mean()) if len(values) else math.nan
