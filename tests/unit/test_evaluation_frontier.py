from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from slurm_harp.core.request import Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.frontier import best_cut, least_lost, pareto_points, smallest_multiplier
from slurm_harp.evaluation.observed import Observed


def random_obs(n: int, seed: int) -> tuple[Observed, np.ndarray]:
    rng = np.random.default_rng(seed)
    actual = rng.lognormal(3.0, 1.0, n)
    requested = np.ceil(actual * rng.uniform(1.0, 20.0, n))
    base = actual * rng.lognormal(0.0, 0.8, n)  # a noisy prediction
    base[rng.random(n) < 0.1] = np.nan  # no prediction: keep the request
    obs = Observed(
        target=Target.TIME,
        requested=requested,
        actual=actual,
        censored=np.zeros(n, dtype=bool),
        cores=np.ones(n),
        run_hours=actual / 60,
        units=np.ones(n),
        stopped_by_harp=np.zeros(n, dtype=bool),
    )
    return obs, base


@pytest.mark.parametrize(("seed", "budget"), [(0, 0.01), (1, 0.05), (2, 0.0), (3, 0.2)])
def test_smallest_multiplier_meets_the_budget_and_is_smallest(seed: int, budget: float) -> None:
    obs, base = random_obs(2000, seed)
    m = smallest_multiplier(base, obs, budget)
    assert costs.killed_fraction(obs, m * base) <= budget
    # Just below it, the budget is broken: nothing smaller would do.
    assert costs.killed_fraction(obs, m * 0.999 * base) > budget


def test_multiplier_search_ends() -> None:
    obs, base = random_obs(200, 4)
    # Any multiplier meets a 100 % budget: the lower end of the range.
    assert smallest_multiplier(base, obs, 1.0) == pytest.approx(1e-3)
    # Predictions of zero stay at Slurm's floor whatever the multiplier: unreachable, the top.
    zeros = np.zeros_like(base)
    assert smallest_multiplier(zeros, obs, 0.0) == pytest.approx(1e6)


def test_pareto_curve_trades_waste_for_kills() -> None:
    obs, base = random_obs(2000, 5)
    points = pareto_points(base, obs)
    killed = [k for k, _ in points]
    cut = [w for _, w in points]
    # Larger multipliers: fewer kills and less waste cut, down to the request itself (0, 0).
    assert all(a >= b for a, b in pairwise(killed))
    assert all(a >= b - 1e-9 for a, b in pairwise(cut))
    assert points[-1] == pytest.approx((0.0, 0.0))
    assert killed[0] > 50 and cut[0] > 50


def test_a_curve_is_read_at_a_kill_rate_and_at_a_cut() -> None:
    curve = [(6.0, 55.0), (2.5, 41.0), (1.2, 30.0), (0.4, 12.0), (0.0, 0.0)]
    assert best_cut(curve, 1.0) == 12.0  # only traced points: 1.2 % is over, nothing in between
    assert best_cut(curve, 2.5) == 41.0
    assert best_cut(curve, 100.0) == 55.0
    assert best_cut([(3.0, 20.0)], 1.0) is None and best_cut([], 1.0) is None
    assert least_lost(curve, 40.0) == 2.5
    assert least_lost(curve, 0.0) == 0.0
    assert least_lost(curve, 60.0) is None
    # A NaN cut (no waste to cut) is no point on the frontier.
    assert best_cut([(0.0, float("nan"))], 1.0) is None


def test_the_reading_of_a_traced_curve_is_monotone() -> None:
    obs, base = random_obs(2000, 6)
    curve = pareto_points(base, obs)
    cuts = [best_cut(curve, x) for x in (0.5, 1.0, 2.0, 5.0, 100.0)]
    assert all(c is not None for c in cuts)
    assert cuts == sorted(cuts)  # type: ignore[type-var]
    need = least_lost(curve, 40.0)
    assert need is not None and best_cut(curve, need) is not None and best_cut(curve, need) >= 40.0  # type: ignore[operator]


def test_the_curve_counts_newly_killed_jobs_as_assess_does() -> None:
    """A job that ran into its own limit (censored) and is given a lower one is killed earlier, not
    newly: assess and ours' curve leave it out of the newly killed, and so does a baseline's curve."""
    obs = Observed(
        target=Target.TIME,
        requested=np.full(10, 100.0),
        actual=np.array([10.0] * 9 + [100.0]),
        censored=np.array([False] * 9 + [True]),
        cores=np.ones(10),
        run_hours=np.array([10.0] * 9 + [100.0]) / 60,
        units=np.ones(10),
        stopped_by_harp=np.zeros(10, dtype=bool),
    )
    base = np.full(10, 20.0)
    figures = costs.assess(obs, base)
    assert (figures["newly_killed_pct"], figures["censored_lowered_pct"]) == (0.0, 10.0)
    [(lost, cut)] = pareto_points(base, obs, np.array([1.0]))
    assert lost == figures["newly_killed_pct"]
    assert cut == pytest.approx(figures["waste_cut_pct"])


@pytest.mark.parametrize("scale", [3e-5, 3e2], ids=["predictions-tiny", "predictions-huge"])
def test_the_curve_spans_every_multiplier_the_search_can_choose(scale: float) -> None:
    """Predictions 30,000 times too small (or 300 times too large) need a multiplier past 1e5 (or
    below 0.02), where the curve ended: the setting chosen on validation lay off it, and the
    hindsight table read "-" at the very budget that setting met (or a cut 2.3 points short)."""
    obs, base = random_obs(2000, 8)
    m = smallest_multiplier(base * scale, obs, 0.01)
    assert not 0.02 <= m <= 1e5  # within the search, outside the curve's old span
    chosen = costs.assess(obs, m * base * scale)["waste_cut_pct"]
    read = best_cut(pareto_points(base * scale, obs), 1.0)
    assert read is not None and chosen is not None
    assert read >= chosen - 1.0  # the grid's next point, 7 % above m
