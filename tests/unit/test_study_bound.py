"""The hindsight ceiling of tests/bench/study_bound: its knapsack is exact and its figures are the
evaluation's own."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.core.request import Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import Observed
from tests.bench.study_bound import hindsight_bound


def _observed(jobs: list[tuple[float, float, int]]) -> Observed:
    """Time target: (request minutes, run minutes, cores) per job; runs past the request are censored."""
    requested = np.array([j[0] for j in jobs])
    actual = np.array([j[1] for j in jobs])
    return Observed(
        target=Target.TIME,
        requested=requested,
        actual=actual,
        censored=actual > requested,
        cores=np.array([float(j[2]) for j in jobs]),
        run_hours=actual / 60.0,
        units=np.ones(len(jobs)),
    )


def _brute_force(obs: Observed, groups: list[int], budget: float) -> float:
    """The largest cut over every whole-minute limit per group (NaN: keep the requests)."""
    max_kills = int(budget * len(obs))
    names = sorted(set(groups))
    choices = [np.nan, *range(1, int(obs.requested.max()) + 1)]
    best = 0.0
    for picked in itertools.product(choices, repeat=len(names)):
        limits = np.array([picked[names.index(g)] for g in groups], dtype=float)
        if round(costs.killed_fraction(obs, limits) * len(obs)) <= max_kills:
            best = max(best, costs.waste_cut_pct(obs, limits))
    return best


job = st.tuples(st.integers(2, 9), st.floats(0.2, 10.0), st.integers(1, 4))


@settings(max_examples=40, deadline=None)
@given(
    jobs=st.lists(st.tuples(job, st.integers(0, 1)), min_size=2, max_size=7),
    budget=st.sampled_from([0.0, 0.2, 0.5]),
)
def test_the_knapsack_finds_the_best_limit_per_group(
    jobs: list[tuple[tuple[int, float, int], int]], budget: float
) -> None:
    obs = _observed([(float(q), r, c) for (q, r, c), _ in jobs])
    groups = [g for _, g in jobs]
    cut, killed = hindsight_bound(obs, groups, budget)
    assert killed <= 100.0 * int(budget * len(obs)) / len(obs) + 1e-9
    if costs.waste(obs, obs.requested) == 0:  # every job ran past its request: nothing to cut
        assert np.isnan(cut)
    else:
        assert np.isclose(cut, _brute_force(obs, groups, budget), atol=1e-9)


def test_one_group_of_identical_jobs_is_cut_to_its_run() -> None:
    obs = _observed([(100.0, 30.0, 2)] * 10)
    cut, killed = hindsight_bound(obs, ["a"] * 10)
    assert (cut, killed) == (100.0, 0.0)


def test_the_budget_buys_the_biggest_saving() -> None:
    # Group "a": nine short jobs and one long one; with one kill allowed, the long one dies and the
    # limit falls to the short ones' run. Group "b" cannot use the kill as well.
    jobs = [(100.0, 10.0, 1)] * 9 + [(100.0, 90.0, 1)] + [(100.0, 50.0, 1), (100.0, 60.0, 1)]
    groups = ["a"] * 10 + ["b", "b"]
    obs = _observed(jobs)
    cut, killed = hindsight_bound(obs, groups, budget=0.1)
    limits = np.array([10.0] * 10 + [60.0, 60.0])
    assert cut == costs.waste_cut_pct(obs, limits)
    assert np.isclose(killed, 100.0 / 12)
