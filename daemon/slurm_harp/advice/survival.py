"""A job's run time as a distribution: what the re-execution cost needs of it.

Two numbers, in minutes: ``survival(t)`` = P(run time > t), the risk of being killed by a limit
t; and ``partial_mean(low, high)`` = E[run time; low < run time <= high], what the attempt that
finishes in that interval is expected to run for, weighted by its probability.

- ``Empirical``: equally likely run times (a user's own runs): what the advice prices with.
- ``PointMasses``: a discrete distribution of any weights, Empirical's meaning written out (the
  tests' hand-computed cases check both).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Protocol

__all__ = ["Empirical", "PointMasses", "Runtime"]


class Runtime(Protocol):
    def survival(self, t: float) -> float: ...

    def partial_mean(self, low: float, high: float) -> float: ...


@dataclass(frozen=True, slots=True)
class PointMasses:
    """Run time ``values[i]`` with probability ``probabilities[i]`` (they sum to 1)."""

    values: Sequence[float]
    probabilities: Sequence[float]

    def __post_init__(self) -> None:
        if len(self.values) != len(self.probabilities) or not self.values:
            raise ValueError("point masses: as many probabilities as values, at least one")
        if not all(math.isfinite(v) and v >= 0 for v in self.values):
            raise ValueError(f"point masses: run times must be finite and >= 0, got {self.values}")
        if not all(p >= 0 for p in self.probabilities) or not math.isclose(sum(self.probabilities), 1.0):
            raise ValueError(f"point masses: probabilities must be >= 0, sum 1; got {self.probabilities}")

    def survival(self, t: float) -> float:
        return float(sum(p for v, p in zip(self.values, self.probabilities, strict=True) if v > t))

    def partial_mean(self, low: float, high: float) -> float:
        pairs = zip(self.values, self.probabilities, strict=True)
        return float(sum(v * p for v, p in pairs if low < v <= high))


class Empirical:
    """Equally likely run times: PointMasses' meaning, by bisection (a thousand runs cost no more
    than ten)."""

    def __init__(self, minutes: Sequence[float]) -> None:
        if not minutes or not all(math.isfinite(t) and t >= 0 for t in minutes):
            raise ValueError(f"run times must be finite and >= 0, at least one: {minutes}")
        self.values = sorted(minutes)
        self._sums = [0.0, *accumulate(self.values)]

    def survival(self, t: float) -> float:
        return (len(self.values) - bisect.bisect_right(self.values, t)) / len(self.values)

    def partial_mean(self, low: float, high: float) -> float:
        if high <= low:
            return 0.0
        lo, hi = bisect.bisect_right(self.values, low), bisect.bisect_right(self.values, high)
        return (self._sums[hi] - self._sums[lo]) / len(self.values)
