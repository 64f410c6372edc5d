"""The hindsight ceiling (evaluation/ceiling.py): its knapsack is exact, its figures are the
evaluation's own, and it groups jobs as named."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.ceiling import ceiling, ceilings
from slurm_harp.evaluation.observed import Observed, observe


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
        stopped_by_harp=np.zeros(len(jobs), dtype=bool),
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
    cut, killed, count = ceiling(obs, groups, budget)
    assert count == len(set(groups))
    assert killed <= 100.0 * int(budget * len(obs)) / len(obs) + 1e-9
    if costs.waste(obs, obs.requested) == 0:  # every job ran past its request: nothing to cut
        assert np.isnan(cut)
    else:
        assert np.isclose(cut, _brute_force(obs, groups, budget), atol=1e-9)


def test_one_group_of_identical_jobs_is_cut_to_its_run() -> None:
    obs = _observed([(100.0, 30.0, 2)] * 10)
    assert ceiling(obs, ["a"] * 10, 0.01) == (100.0, 0.0, 1)


def test_the_budget_buys_the_biggest_saving() -> None:
    # Group "a": nine short jobs and one long one; with one kill allowed, the long one dies and the
    # limit falls to the short ones' run. Group "b" cannot use the kill as well.
    jobs = [(100.0, 10.0, 1)] * 9 + [(100.0, 90.0, 1)] + [(100.0, 50.0, 1), (100.0, 60.0, 1)]
    groups = ["a"] * 10 + ["b", "b"]
    obs = _observed(jobs)
    cut, killed, count = ceiling(obs, groups, budget=0.1)
    assert count == 2
    limits = np.array([10.0] * 10 + [60.0, 60.0])
    assert cut == costs.waste_cut_pct(obs, limits)
    assert np.isclose(killed, 100.0 / 12)


def test_ceilings_group_by_user_then_by_user_and_name() -> None:
    # alice's two names run 10 and 50 minutes, bob's one 30: one limit per user + name cuts more.
    runs = {("alice", "short"): 10, ("alice", "long"): 50, ("bob", "sim"): 30}
    jobs = [
        JobRecord(
            job_id=f"{i}",
            request=JobRequest(user_name=user, job_name=name, time_limit_minutes=120, submit_time=60 * i),
            state="COMPLETED",
            elapsed_s=60 * minutes,
            end_time=60 * (i + minutes),
        )
        for i, ((user, name), minutes) in enumerate(list(runs.items()) * 20)
    ]
    obs = observe(jobs, Target.TIME)
    found = ceilings(jobs, obs, 0.0)
    assert list(found) == ["user", "user + name"]
    assert found["user"]["groups"] == 2 and found["user + name"]["groups"] == 3
    assert found["user + name"]["waste_cut_pct"] == 100.0
    # alice's one limit must cover her 50-minute jobs: her 10-minute ones keep 40 minutes' waste.
    assert found["user"]["waste_cut_pct"] == costs.waste_cut_pct(obs, np.array([50.0, 50.0, 30.0] * 20))
    assert found["user"]["lost_pct"] == 0.0
