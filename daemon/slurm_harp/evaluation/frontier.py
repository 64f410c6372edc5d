"""The knob of a scaled strategy: choosing its multiplier at a kill budget, and its Pareto curve.

A strategy with one monotone knob (limits = multiplier x base prediction, capped at the request)
trades waste cut against newly killed jobs. ``smallest_multiplier`` picks the knob on validation;
``pareto_points`` traces the whole trade-off (on the test window, for the report only);
``best_cut`` and ``least_lost`` read a traced curve at a kill rate or a cut (the report's
hindsight frontier table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from slurm_harp.core.accuracy import cut_pct
from slurm_harp.core.job import JobRecord
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import Observed

SEARCH_RANGE = (1e-3, 1e6)
SEARCH_STEPS = 60


def _grid(core: np.ndarray, span: tuple[float, float]) -> np.ndarray:
    """The geometric grid ``core`` extended by its own step both ways until it covers ``span``:
    ``core``'s points are kept as they are."""
    step = float(core[1] / core[0])
    below = math.ceil(math.log(core[0] / span[0], step))
    above = math.ceil(math.log(span[1] / core[-1], step))
    return np.concatenate(
        [core[0] / step ** np.arange(below, 0, -1), core, core[-1] * step ** np.arange(1, above + 1)]
    )


# Geometric grid for the curves, 7 % apart (the report reads the curves at given kill rates: a
# coarser grid reads them low), over the whole SEARCH_RANGE: a multiplier chosen on validation lies
# on its curve. It spanned 0.02 to 1e5 (those points kept, the published curves' own), and on an
# extreme trace the setting chosen lay off the curve, its hindsight row "-".
MULTIPLIERS: np.ndarray = _grid(np.geomspace(0.02, 1e5, 221), SEARCH_RANGE)

Curve = list[tuple[float, float]]


@runtime_checkable
class Tunable(Protocol):
    """Optional for a Strategy: its trade-off curve, drawn by `harp evaluate`.

    ``pareto(jobs, start)`` returns (newly killed %, waste cut %) points for jobs[start:] as the
    strategy's knob (a multiplier, a quantile level, a conformal margin ...) sweeps its range,
    with the strategy otherwise as fitted. Called after ``fit``; it must not refit anything on
    jobs[start:]: the curve describes the fitted strategy, it does not choose it.
    """

    def pareto(self, jobs: Sequence[JobRecord], start: int) -> Curve: ...


def smallest_multiplier(
    base: np.ndarray, obs: Observed, budget: float, search: tuple[float, float] = SEARCH_RANGE
) -> float:
    """The smallest m with killed_fraction(m x base) <= ``budget`` (bisection in log space).

    The killed fraction never grows with m (limits only rise, then cap at the request), so the
    search is exact up to its resolution; the upper end of the final bracket is returned, which
    always meets the budget when any m in the range does (else the range's top).
    """
    use = obs.usable()
    sub, b = obs.take(use), base[use]
    lo, hi = search
    if costs.killed_fraction(sub, lo * b) <= budget:
        return lo
    if costs.killed_fraction(sub, hi * b) > budget:
        return hi
    for _ in range(SEARCH_STEPS):
        mid = float(np.sqrt(lo * hi))
        if costs.killed_fraction(sub, mid * b) <= budget:
            hi = mid
        else:
            lo = mid
    return hi


def pareto_points(base: np.ndarray, obs: Observed, multipliers: np.ndarray = MULTIPLIERS) -> Curve:
    """(newly killed %, waste cut %) of limits m x base for each multiplier m, ordered by m: the
    figures of costs.assess (a censored job given a lower limit is killed earlier, not newly)."""
    use = obs.usable()
    sub, b = obs.take(use), base[use]
    before = costs.waste(sub, sub.requested)
    points: Curve = []
    for m in multipliers:
        eff = costs.effective_limits(sub, float(m) * b)
        lost = 100.0 * float(np.mean(costs.newly_killed(sub, eff))) if len(sub) else 0.0
        points.append((lost, cut_pct(before, costs.waste(sub, eff))))
    return points


def best_cut(curve: Curve, max_lost: float) -> float | None:
    """The largest waste cut % among the curve's points with at most ``max_lost`` % lost (newly
    killed or slowed); None when no point is that safe. Only traced points count: a knob setting
    between two of them is not assumed to exist."""
    cuts = [cut for lost, cut in curve if lost <= max_lost and np.isfinite(cut)]
    return max(cuts) if cuts else None


def least_lost(curve: Curve, min_cut: float) -> float | None:
    """The fewest % lost among the curve's points that cut at least ``min_cut`` % of the waste;
    None when no point cuts that much."""
    losses = [lost for lost, cut in curve if cut >= min_cut and np.isfinite(lost)]
    return min(losses) if losses else None
