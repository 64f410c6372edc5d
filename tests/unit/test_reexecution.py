"""advice.reexecution: HARP's doubled-limit reruns, against hand-computed expectations."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_harp.advice.reexecution import attempt_limits, charged_minutes, expected_reexecution, next_limit
from slurm_harp.advice.survival import PointMasses
from slurm_harp.core.request import Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import Observed


def test_limits_double_up_to_the_cap() -> None:
    assert attempt_limits(10, 100) == (10, 20, 40, 80, 100)
    assert attempt_limits(10, 35) == (10, 20, 35)
    assert attempt_limits(10, 10) == (10,)
    assert next_limit(np.array([10.0, 30.0]), np.array([100.0, 50.0])).tolist() == [20.0, 50.0]


def test_a_known_run_is_charged_its_killed_attempts_and_itself() -> None:
    # Limits 10, 20, 40, 80, 100: a 35-minute run is killed at 10 and 20, then runs 35.
    assert charged_minutes(10, 100, 35) == 10 + 20 + 35
    assert charged_minutes(10, 100, 10) == 10  # a run as long as its limit finishes
    assert charged_minutes(10, 100, 5) == 5
    assert charged_minutes(10, 100, 100) == 10 + 20 + 40 + 80 + 100
    assert charged_minutes(10, 100, 101) == float("inf")  # longer than the cap: never finishes


@pytest.mark.parametrize(("first", "cap"), [(0, 10), (20, 10), (10, float("inf")), (float("nan"), 10)])
def test_bad_limits_are_refused(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="attempt limits"):
        attempt_limits(first, cap)


def test_two_point_run_time() -> None:
    # T = 5 or 30 minutes, 1/2 each; first limit 10, cap 100 (the example in docs/advice.md).
    r = expected_reexecution(10, 100, PointMasses([5, 30], [0.5, 0.5]))
    assert [a.limit for a in r.attempts] == [10, 20, 40]  # 80 and 100 cannot happen: left out
    assert [a.p_runs for a in r.attempts] == [1.0, 0.5, 0.5]
    assert [a.expected_minutes for a in r.attempts] == [7.5, 10.0, 15.0]
    # Directly: 1/2 x 5 + 1/2 x (10 + 20 + 30).
    assert r.expected_minutes == 32.5 and r.expected_attempts == 2.0 and r.p_unfinished == 0.0


def test_a_run_past_the_cap_never_finishes() -> None:
    r = expected_reexecution(10, 100, PointMasses([5, 300], [0.5, 0.5]))
    assert [a.limit for a in r.attempts] == [10, 20, 40, 80, 100]
    assert r.p_unfinished == 0.5
    assert r.expected_minutes == 0.5 * 5 + 0.5 * (10 + 20 + 40 + 80 + 100)
    assert r.expected_attempts == 1 + 4 * 0.5


def test_a_first_limit_at_the_cap_is_one_attempt() -> None:
    r = expected_reexecution(60, 60, PointMasses([30, 90], [0.9, 0.1]))
    assert len(r.attempts) == 1
    assert r.expected_minutes == pytest.approx(0.9 * 30 + 0.1 * 60) and r.p_unfinished == pytest.approx(0.1)


def test_the_evaluation_counts_the_same_policy() -> None:
    # One job that ran 35 minutes on 4 cores, asked for 100, cut to 10: attempts 10, 20, then 40
    # (finishes at 35). The evaluation's replay and the expectation over a point mass agree.
    cores, actual, requested = 4.0, 35.0, 100.0
    observed = Observed(
        target=Target.TIME,
        requested=np.array([requested]),
        actual=np.array([actual]),
        censored=np.array([False]),
        cores=np.array([cores]),
        run_hours=np.array([actual / 60]),
        units=np.array([1.0]),
        stopped_by_harp=np.array([False]),
    )
    total, _ = costs.reexecution(observed, np.array([10.0]))
    expected = expected_reexecution(10, requested, PointMasses([actual], [1.0]))
    assert total == pytest.approx(cores * expected.expected_minutes / 60)
    assert expected.expected_minutes == 10 + 20 + 35
