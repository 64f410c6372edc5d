"""What each job asked for and used, per target, as aligned float arrays (NaN = unknown).

Units: time in minutes, memory in MB per node, CPUs in CPUs; the values are core.job.JobRecord's
(``requested``, ``used``, ``stopped_at_limit``, ``limit_units``), read from jobs as submitted
(core.tag.as_submitted), with what a limit harp set did to them (``stopped_by_harp``, ``cores``) as
training reads it (learning.targets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_harp.core.extension import stopped_at_harps_limit, stopped_by_harp
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.core.tag import Tag, own_cores

# The smallest limit Slurm takes, per target: a rewrite never goes below it.
FLOOR = {Target.TIME: 1.0, Target.MEMORY: 1.0, Target.CPUS: 1.0}
UNIT = {Target.TIME: "min", Target.MEMORY: "MB", Target.CPUS: "CPUs"}


@dataclass(frozen=True)
class Observed:
    """Aligned per-job arrays for one target. ``censored``: the actual value is a lower bound."""

    target: Target
    requested: np.ndarray
    actual: np.ndarray
    censored: np.ndarray
    # Cores a run occupies as its user asked (core.tag.own_cores: not the fewer harp cut it to): the
    # compute cost of an attempt is cores x hours
    cores: np.ndarray
    run_hours: np.ndarray
    units: np.ndarray  # how many nodes / processors a memory limit applies to (1 per CPU otherwise)
    # Censored jobs a limit harp brought below the user's own stopped (core.extension.stopped_by_harp):
    # they count as finished under their request (core.accuracy.finished_under_request)
    stopped_by_harp: np.ndarray

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
            stopped_by_harp=self.stopped_by_harp[index],
        )


def observe(jobs: Sequence[JobRecord], target: Target, tags: Sequence[Tag | None] | None = None) -> Observed:
    """``jobs``' arrays for ``target``; ``tags``: their harp tags, when the caller parsed them
    already (None: each job's is parsed here)."""
    n = len(jobs)
    requested = np.full(n, math.nan)
    actual = np.full(n, math.nan)
    censored = np.zeros(n, dtype=bool)
    cores = np.ones(n)
    run_hours = np.zeros(n)
    units = np.ones(n)
    by_harp = np.zeros(n, dtype=bool)
    if tags is not None and len(tags) != n:
        raise ValueError(f"{len(tags)} tags for {n} jobs")
    for i, job in enumerate(jobs):
        q, a = job.requested(target), job.used(target)
        if q is not None:
            requested[i] = q
        if a is not None:
            actual[i] = a
        censored[i] = job.stopped_at_limit(target)
        if tags is None:  # each parsed only where it may tell (own_cores parses one with a c0)
            by_harp[i] = censored[i] and stopped_by_harp(job, target)
            cores[i] = own_cores(job)
        else:
            tag = tags[i]
            by_harp[i] = censored[i] and tag is not None and stopped_at_harps_limit(job, tag, target)
            cores[i] = job.cores if tag is None else own_cores(job, tag)
        run_hours[i] = job.elapsed_s / 3600.0
        units[i] = job.limit_units(target)
    return Observed(target, requested, actual, censored, cores, run_hours, units, by_harp)
