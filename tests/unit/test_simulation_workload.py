"""The simulator's input, Workload: what it refuses, naming the job, before a replay can go wrong."""

from __future__ import annotations

import math

import pytest

from slurm_harp.simulation import catalog, simulate
from slurm_harp.simulation.workload import Workload

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("submit", [NAN, INF, -INF])
def test_a_submit_time_that_is_not_finite_is_refused_naming_the_job(submit: float) -> None:
    """A NaN submit time passed every check (it compares false with its neighbours) and simulate()
    never returned, under either scheduler."""
    rows = [("a", 0.0, 10.0, 60.0, 1, 0), ("b", submit, 10.0, 60.0, 1, 0), ("c", 5.0, 10.0, 60.0, 1, 0)]
    with pytest.raises(ValueError, match=f"^job b: submit time {submit}, not a finite number$"):
        Workload.build(4, rows)


@pytest.mark.parametrize(("request_s", "run_s"), [(INF, 10.0), (NAN, 10.0), (60.0, INF), (60.0, NAN)])
def test_a_request_or_run_that_is_not_finite_is_refused_naming_the_job(
    request_s: float, run_s: float
) -> None:
    """An infinite request passed: the Slurm-like scheduler then ended in an OverflowError
    (math.ceil of infinity in backfill.py)."""
    rows = [("a", 0.0, run_s, request_s, 1, 0), ("b", 1.0, 10.0, 60.0, 4, 0)]
    said = f"request {request_s}, run {run_s}: expected a finite request > 0 and run >= 0"
    with pytest.raises(ValueError, match=f"^job a: {said}$"):
        Workload.build(4, rows)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["easy", "slurm"])
def test_finite_extreme_times_still_replay(name: str) -> None:
    """The checks refuse only what is not a number: a year-long request and a negative submit time
    (a trace counted from its log's start) still replay."""
    w = Workload.build(4, [("a", -5.0, 10.0, 365 * 86400.0, 1, 0), ("b", 1.0, 10.0, 60.0, 4, 0)])
    result = simulate(w, catalog.scheduler(name), catalog.limits("request", w))
    assert list(result.start) == [-5.0, 5.0]  # b, the whole machine, waits for a to end
