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

import math
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_harp.advice.evidence import Evidence, Run
from slurm_harp.core.request import JobRequest

__all__ = ["MEMORY_MARGIN", "Scaling", "mem_per_node"]

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


def mem_per_node(evidence: Evidence, job: JobRequest, size: int, nodes: int, floor: float) -> float:
    """MiB per node a candidate of ``size`` on ``nodes`` should ask for (0: unknown, the
    partition's default applies): the least bound the runs' peaks give (each size's largest),
    plus 20 %, at least ``floor``; without peaks, the job's own memory request."""
    per_node = size / nodes
    bounds: dict[float, float] = {}
    for r in evidence.runs:
        if r.peak_mb is None or r.peak_mb <= 0:
            continue
        theirs = r.size / r.nodes
        bound = r.peak_mb * max(1.0, per_node / theirs)
        bounds[theirs] = max(bounds.get(theirs, 0.0), bound)
    if bounds:
        return float(max(math.ceil(min(bounds.values()) * MEMORY_MARGIN), math.ceil(floor)))
    if job.mem_per_node_mb is not None:
        return float(job.mem_per_node_mb)
    if job.mem_per_cpu_mb is not None:
        cpus = size if evidence.unit == "CPU" else (job.min_cpus or 1)
        return float(job.mem_per_cpu_mb * math.ceil(cpus / nodes))
    return 0.0
