"""A job's run time as a distribution: what the re-execution cost needs of it.

Two numbers, in minutes: ``survival(t)`` = P(run time > t), the risk of being killed by a limit
t; and ``partial_mean(low, high)`` = E[run time; low < run time <= high], what the attempt that
finishes in that interval is expected to run for, weighted by its probability.

- ``PointMasses``: a discrete distribution (hand-computed cases, replayed histories).
- ``Empirical``: equally likely run times (a user's own runs), PointMasses' meaning by bisection.
- ``PiecewiseSurvival``: survival known at a few points, linear in between (run time uniform in
  each interval), from the model's quantile predictions (the q-quantile t gives the point
  (t, 1 - q)) or from any (limit, risk) pairs. It starts at (0, 1) and ends at (upper, 0):
  ``upper`` bounds the run time (the user's own request, say, or a multiple of the last point).
- ``RiskCurve``: only a risk function. Then nothing is known of where in an interval a finishing
  run ends, and ``partial_mean`` charges the interval's upper end: an upper bound on the cost.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Protocol

__all__ = ["Empirical", "PiecewiseSurvival", "PointMasses", "RiskCurve", "Runtime"]


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


@dataclass(frozen=True, slots=True)
class PiecewiseSurvival:
    """Survival through ``knots`` (t, s): t increasing from 0, s non-increasing from 1 to 0."""

    knots: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        ts = [t for t, _ in self.knots]
        ss = [s for _, s in self.knots]
        if len(ts) < 2 or ts[0] != 0 or ss[0] != 1 or ss[-1] != 0:
            raise ValueError(f"survival knots must run from (0, 1) to (upper, 0), got {self.knots}")
        if any(b <= a for a, b in pairwise(ts)) or any(b > a for a, b in pairwise(ss)):
            raise ValueError(f"survival knots: t must increase and s must not, got {self.knots}")

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]], upper: float) -> PiecewiseSurvival:
        """Through (t, P(run time > t)) points, made non-increasing the safe way: a point's risk
        is raised to the largest risk at or after it (never lowered). Points at t <= 0 are
        dropped (the curve starts at (0, 1), so the run time is only ever taken as longer)."""
        kept: dict[float, float] = {}
        for t, s in points:
            if not (math.isfinite(t) and 0.0 <= s <= 1.0):
                raise ValueError(f"survival point ({t}, {s}): t must be finite, s in [0, 1]")
            if t >= upper:
                raise ValueError(f"survival point at {t} is not below the upper bound {upper}")
            if t > 0:
                kept[t] = max(s, kept.get(t, 0.0))
        ordered = sorted(kept.items())
        for i in range(len(ordered) - 2, -1, -1):
            ordered[i] = (ordered[i][0], max(ordered[i][1], ordered[i + 1][1]))
        return cls(((0.0, 1.0), *ordered, (float(upper), 0.0)))

    @classmethod
    def from_quantiles(cls, predictions: Mapping[float, float], upper: float) -> PiecewiseSurvival:
        """From quantile predictions {q: run time}: the q-quantile t is the point (t, 1 - q)."""
        return cls.from_points(((t, 1.0 - q) for q, t in predictions.items()), upper)

    def survival(self, t: float) -> float:
        if t <= 0:
            return 1.0
        for (a, sa), (b, sb) in pairwise(self.knots):
            if t <= b:
                return sa + (sb - sa) * (t - a) / (b - a)
        return 0.0

    def partial_mean(self, low: float, high: float) -> float:
        """Each interval's mass in (low, high] at the middle of its overlap (uniform density)."""
        total = 0.0
        for (a, sa), (b, sb) in pairwise(self.knots):
            lo, hi = max(a, low), min(b, high)
            if hi > lo:
                total += (sa - sb) / (b - a) * (hi - lo) * (lo + hi) / 2.0
        return total


@dataclass(frozen=True, slots=True)
class RiskCurve:
    """Only ``risk(t)`` = P(run time > t) is known (clipped to [0, 1])."""

    risk: Callable[[float], float]

    def survival(self, t: float) -> float:
        return min(1.0, max(0.0, float(self.risk(t))))

    def partial_mean(self, low: float, high: float) -> float:
        # Where in (low, high] the run ends is unknown: charge it the whole of ``high``.
        return high * max(0.0, self.survival(low) - self.survival(high))
