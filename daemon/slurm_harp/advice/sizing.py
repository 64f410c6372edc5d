"""What the evidence says a run at a given size takes: its run times and the memory to ask for.

Run time: ``log T = a + b log n`` fitted by least squares over the completed runs (T minutes, n
the size they ran at); a size's run times are the fitted value times each run's residual factor,
equally likely, so the spread of the user's own runs carries over. One size only: the runs at
that size as they are. Sizes outside the sizes run get no run time (no extrapolation).

A fit whose slope is not negative says larger runs took no less time. No strong scaling does that:
the runs did different work (one job name over different inputs), so the fit is no evidence of how
the size changes the run time, and the advice does not compare sizes on it (``Scaling.scales``).

Memory per node is taken to grow with the size per node, but no faster than in proportion: a run
bounds a candidate with no more per node than it had by its peak, one with more by its peak scaled
up in proportion; the least of these bounds, plus 20 %.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_harp.advice.evidence import Evidence, Run
from slurm_harp.core.request import JobRequest

__all__ = ["MEMORY_MARGIN", "Memory", "Scaling"]

MEMORY_MARGIN = 1.2  # a memory request is the peak the evidence gives plus 20 %


@dataclass(frozen=True, slots=True)
class Scaling:
    """``log minutes = intercept + slope log size``, with the runs' residuals, over [low, high]."""

    intercept: float
    slope: float
    residuals: tuple[float, ...]
    low: int
    high: int

    @classmethod
    def fit(cls, runs: Sequence[Run]) -> Scaling | None:
        if not runs:
            return None
        xs = [math.log(r.size) for r in runs]
        ys = [math.log(r.minutes) for r in runs]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0
        intercept = my - slope * mx
        residuals = tuple(y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True))
        sizes = [r.size for r in runs]
        return cls(intercept, slope, residuals, min(sizes), max(sizes))

    @property
    def scales(self) -> bool:
        """Whether the fit may compare sizes: runs at two sizes or more, larger ones faster."""
        return self.low < self.high and self.slope < 0

    def minutes(self, size: int) -> tuple[float, ...] | None:
        """The run times at ``size`` (equally likely), None outside the sizes run."""
        if not self.low <= size <= self.high:
            return None
        centre = self.intercept + self.slope * math.log(size)
        return tuple(math.exp(centre + r) for r in self.residuals)


@dataclass(frozen=True, slots=True)
class Memory:
    """What the evidence says of memory, read once: the largest peak at each size per node, in
    order, with running minima so a candidate's least bound is found by bisection."""

    per_run: tuple[float, ...]  # the sizes per node run, increasing
    peaks: tuple[float, ...]  # the largest peak per node (MiB) at each
    least_above: tuple[float, ...]  # [i]: the least peak at per_run[i:]
    steepest_below: tuple[int, ...]  # [i]: the index in per_run[:i] of least peak per unit, -1: none
    job: JobRequest
    floor: float

    @classmethod
    def of(cls, evidence: Evidence, job: JobRequest, floor: float) -> Memory:
        largest: dict[float, float] = {}
        for r in evidence.runs:
            if r.peak_mb is not None and r.peak_mb > 0:
                theirs = r.size / r.nodes
                largest[theirs] = max(largest.get(theirs, 0.0), r.peak_mb)
        per_run, peaks = tuple(sorted(largest)), tuple(largest[k] for k in sorted(largest))
        least_above = [*peaks, math.inf]
        for i in reversed(range(len(peaks))):
            least_above[i] = min(least_above[i], least_above[i + 1])
        steepest, best = [-1], -1
        for i, (theirs, peak) in enumerate(zip(per_run, peaks, strict=True)):
            if best < 0 or peak / theirs < peaks[best] / per_run[best]:
                best = i
            steepest.append(best)
        return cls(per_run, peaks, tuple(least_above), tuple(steepest), job, floor)

    def per_node(self, size: int, nodes: int, cpus: int | None = None) -> float:
        """MiB per node a candidate of ``size`` on ``nodes`` holding ``cpus`` CPUs (None: ``size``,
        a CPU job's) should ask for (0: unknown, the partition's default applies): the least bound
        the runs' peaks give, plus 20 %, at least the floor; without peaks, the job's own memory
        request. A run with as much per node or more bounds it by its peak, one with less by its
        peak scaled up in proportion."""
        if self.peaks:
            per_node = size / nodes
            i = bisect.bisect_left(self.per_run, per_node)
            least = self.least_above[i]
            if (j := self.steepest_below[i]) >= 0:
                least = min(least, self.peaks[j] * (per_node / self.per_run[j]))
            return float(max(math.ceil(least * MEMORY_MARGIN), math.ceil(self.floor)))
        job = self.job
        if job.mem_per_node_mb is not None:
            return float(job.mem_per_node_mb)
        if job.mem_per_cpu_mb is not None:
            # per CPU the candidate holds, as Slurm gives it: a GPU job's CPUs follow its GPUs
            return float(job.mem_per_cpu_mb * math.ceil((size if cpus is None else cpus) / nodes))
        return 0.0
