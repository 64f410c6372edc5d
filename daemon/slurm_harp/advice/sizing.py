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
up in proportion; the least of these bounds, plus 20 %. No peak known and none asked: the runs'
own requests bound it alike (without the margin: Slurm kept each run within its request).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurm_harp.advice.evidence import Evidence, Run
from slurm_harp.core.request import JobRequest

__all__ = ["MEMORY_MARGIN", "Bounds", "Memory", "Scaling"]

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
class Bounds:
    """Memory per node known at some sizes per node (MiB), in order, with running minima so a
    candidate's least bound is found by bisection."""

    per_run: tuple[float, ...] = ()  # the sizes per node run, increasing
    values: tuple[float, ...] = ()  # the largest memory per node at each
    least_above: tuple[float, ...] = ()  # [i]: the least value at per_run[i:]
    steepest_below: tuple[int, ...] = ()  # [i]: the index in per_run[:i] of least value per unit, -1: none

    @classmethod
    def of(cls, known: Iterable[tuple[float, float | None]]) -> Bounds:
        """From (size per node, MiB per node) of runs; a value that is None or 0 is unknown."""
        largest: dict[float, float] = {}
        for theirs, value in known:
            if value is not None and value > 0:
                largest[theirs] = max(largest.get(theirs, 0.0), value)
        per_run, values = tuple(sorted(largest)), tuple(largest[k] for k in sorted(largest))
        least_above = [*values, math.inf]
        for i in reversed(range(len(values))):
            least_above[i] = min(least_above[i], least_above[i + 1])
        steepest, best = [-1], -1
        for i, (theirs, value) in enumerate(zip(per_run, values, strict=True)):
            if best < 0 or value / theirs < values[best] / per_run[best]:
                best = i
            steepest.append(best)
        return cls(per_run, values, tuple(least_above), tuple(steepest))

    def least(self, per_node: float) -> float | None:
        """The least bound at ``per_node`` (None: nothing known). A run with as much per node or
        more bounds it by its value, one with less by its value scaled up in proportion."""
        if not self.values:
            return None
        i = bisect.bisect_left(self.per_run, per_node)
        least = self.least_above[i]
        if (j := self.steepest_below[i]) >= 0:
            least = min(least, self.values[j] * (per_node / self.per_run[j]))
        return least


@dataclass(frozen=True, slots=True)
class Memory:
    """What the evidence says of memory, read once: the runs' peaks, else the job's own request,
    else the runs' own requests (slurmctld gave and billed each run what it asked)."""

    peaks: Bounds
    requests: Bounds  # what the runs asked per node: they held no more, Slurm enforcing it
    job: JobRequest
    floor: float

    @classmethod
    def of(cls, evidence: Evidence, job: JobRequest, floor: float) -> Memory:
        peaks = Bounds.of((r.size / r.nodes, r.peak_mb) for r in evidence.runs)
        requests = Bounds.of((r.size / r.nodes, r.requested_mb) for r in evidence.runs)
        return cls(peaks, requests, job, floor)

    @property
    def known(self) -> bool:
        """Whether anything says how much memory to ask for (else none is priced)."""
        job = self.job
        asked = job.mem_per_node_mb is not None or job.mem_per_cpu_mb is not None
        return bool(self.peaks.values or asked or self.requests.values)

    @property
    def whole_node(self) -> bool:
        """Whether the memory is the job's own ``--mem=0``: all of a node's, which Slurm gives and
        bills (the option takes its partition's; no peak known, so nothing says to ask less)."""
        return not self.peaks.values and self.job.mem_per_node_mb == 0

    def per_node(self, size: int, nodes: int, cpus: int | None = None) -> float:
        """MiB per node a candidate of ``size`` on ``nodes`` holding ``cpus`` CPUs (None: ``size``,
        a CPU job's) should ask for (0: unknown, the partition's default applies; or ``whole_node``):
        the least bound
        the runs' peaks give, plus 20 %, at least the floor; without peaks, the job's own memory
        request; without that, the least bound the runs' own requests give (no margin: a request
        is not a sampled peak)."""
        peak = self.peaks.least(size / nodes)
        if peak is not None:
            return float(max(math.ceil(peak * MEMORY_MARGIN), math.ceil(self.floor)))
        job = self.job
        if job.mem_per_node_mb is not None:
            return float(job.mem_per_node_mb)
        if job.mem_per_cpu_mb is not None:
            # per CPU the candidate holds, as Slurm gives it: a GPU job's CPUs follow its GPUs
            return float(job.mem_per_cpu_mb * math.ceil((size if cpus is None else cpus) / nodes))
        asked = self.requests.least(size / nodes)
        return 0.0 if asked is None else float(math.ceil(asked))
