"""What each job asked for and used, per target, as aligned float arrays (NaN = unknown).

Units: time in minutes, memory in MB per node, CPUs in CPUs. Memory on SWF traces: the reader
takes "used memory per processor" as the per-node peak (the archive's SP2 and CM-5 machines had
one processor per node) and SWF gives no node count, so here the request is compared per
processor too (``memory_request_mb``); JobRequest.requested(MEMORY) would multiply it by the
processor count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.core.request import JobRequest, Target

# The smallest limit Slurm takes, per target: a rewrite never goes below it.
FLOOR = {Target.TIME: 1.0, Target.MEMORY: 1.0, Target.CPUS: 1.0}
UNIT = {Target.TIME: "min", Target.MEMORY: "MB", Target.CPUS: "CPUs"}


def memory_request_mb(request: JobRequest) -> float | None:
    """Requested memory per node; per processor when only a per-CPU request and no node count is
    known (SWF), matching how the SWF reader reports the peak."""
    if request.mem_per_node_mb is None and request.mem_per_cpu_mb is not None and request.min_nodes is None:
        return float(request.mem_per_cpu_mb)
    return request.requested(Target.MEMORY)


def _units(job: JobRecord, target: Target) -> float:
    """How many of the target's units one limit value stands for (the waste weight's count)."""
    request = job.request
    if target is Target.MEMORY:
        per_processor = request.mem_per_node_mb is None and request.min_nodes is None
        if per_processor:
            return float(job.alloc_cpus or request.min_cpus or 1)
        return float(request.min_nodes or 1)
    return 1.0


def _values(job: JobRecord, target: Target) -> tuple[float | None, float | None, bool]:
    """(requested, actual, censored) of one job for ``target``."""
    if target is Target.TIME:
        return job.request.requested(target), job.elapsed_s / 60.0, job.censored
    if target is Target.MEMORY:
        return memory_request_mb(job.request), job.max_rss_mb, job.state == "OUT_OF_MEMORY"
    used = None if job.total_cpu_s is None or job.elapsed_s <= 0 else job.total_cpu_s / job.elapsed_s
    return job.request.requested(target), used, False


@dataclass(frozen=True)
class Observed:
    """Aligned per-job arrays for one target. ``censored``: the actual value is a lower bound."""

    target: Target
    requested: np.ndarray
    actual: np.ndarray
    censored: np.ndarray
    cores: np.ndarray  # cores a run occupies: the compute cost of an attempt is cores x hours
    run_hours: np.ndarray
    units: np.ndarray  # how many nodes / processors a memory limit applies to (1 per CPU otherwise)

    def __len__(self) -> int:
        return int(self.actual.shape[0])

    def usable(self) -> np.ndarray:
        """Jobs that can be scored: a positive request and a positive observed value."""
        with np.errstate(invalid="ignore"):
            mask: np.ndarray = (self.requested > 0) & (self.actual > 0)
        return mask

    def take(self, index: np.ndarray | slice) -> Observed:
        return Observed(
            target=self.target,
            requested=self.requested[index],
            actual=self.actual[index],
            censored=self.censored[index],
            cores=self.cores[index],
            run_hours=self.run_hours[index],
            units=self.units[index],
        )


def observe(jobs: Sequence[JobRecord], target: Target) -> Observed:
    n = len(jobs)
    requested = np.full(n, math.nan)
    actual = np.full(n, math.nan)
    censored = np.zeros(n, dtype=bool)
    cores = np.ones(n)
    run_hours = np.zeros(n)
    units = np.ones(n)
    for i, job in enumerate(jobs):
        q, a, c = _values(job, target)
        if q is not None:
            requested[i] = q
        if a is not None:
            actual[i] = a
        censored[i] = c
        cores[i] = float(job.alloc_cpus or job.request.min_cpus or 1)
        run_hours[i] = job.elapsed_s / 3600.0
        units[i] = _units(job, target)
    return Observed(target, requested, actual, censored, cores, run_hours, units)
