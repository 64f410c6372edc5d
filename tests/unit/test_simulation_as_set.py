"""The simulator plans with the limits the daemon's policy would set, not raw predictions."""

from __future__ import annotations

import math

import pytest

from slurm_harp.core.decision import Action
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.simulation.limits import as_set
from slurm_harp.simulation.workload import Workload

NAN = math.nan


def one(predicted: float, request: float, policy: Policy | None = None) -> float:
    w = Workload.build(1, [("0", 0, 60, request, 1, 0)])
    return as_set([predicted], w, policy or Policy())[0]


def test_a_prediction_becomes_whole_minutes_rounded_up() -> None:
    # Slurm holds minutes: a 618 s prediction is an 11-minute limit, not one 42 s shorter.
    assert one(618.0, 100_000) == 660.0


def test_the_time_floor_holds() -> None:
    assert one(120.0, 100_000) == 600.0
    assert one(120.0, 100_000, Policy(floors={Target.TIME: 1.0})) == 120.0


def test_a_cut_below_min_gain_keeps_the_request() -> None:
    # 55 of 60 minutes saves 8 %, under the 10 % min_gain; 54 saves 10 %.
    assert math.isnan(one(3300.0, 3600))
    assert one(3240.0, 3600) == 3240.0
    assert one(3300.0, 3600, Policy(min_gain=0.0)) == 3300.0


def test_no_prediction_and_a_request_below_the_floor_keep_the_request() -> None:
    assert math.isnan(one(NAN, 3600))
    assert math.isnan(one(60.0, 300))  # the floor (10 min) is above a 5-minute request


def test_a_limit_never_exceeds_a_request_that_is_not_whole_minutes() -> None:
    assert one(1.0, 100_000.5) == 600.0
    assert one(99_000.0, 100_000.5, Policy(min_gain=0.0)) == 99_000.0
    # 1667 whole minutes would be above the 1666.7 asked: the request stays.
    assert math.isnan(one(99_990.0, 100_000.5, Policy(min_gain=0.0)))


@pytest.mark.parametrize("policy", [Policy(), Policy(min_gain=0.0, floors={Target.TIME: 3.0})])
def test_as_set_is_what_the_daemon_decides(policy: Policy) -> None:
    for asked in (1, 5, 10, 11, 12, 30, 59, 60, 61, 600, 2880):
        for predicted in (0.0, 0.4, 1.0, 2.5, 9.2, 10.0, 10.01, 11.0, 27.3, 54.0, 55.5, 61.0, 700.0):
            request = JobRequest(time_limit_minutes=asked)
            decided = policy.decide(Target.TIME, request, Mode.EXTEND, predicted, None, "v")
            got = one(60.0 * predicted, 60.0 * asked, policy)
            if decided.action is Action.REWRITE:
                assert got == 60.0 * (decided.new_value or 0), (asked, predicted)
            else:
                assert math.isnan(got), (asked, predicted)


def test_a_job_that_asked_for_no_limit_keeps_it() -> None:
    # The daemon answers NOT_REQUESTED and changes nothing: its stand-in request is not lowered.
    w = Workload.build(1, [("0", 0, 60, 36_000, 1, 0), ("1", 1, 60, 36_000, 1, 0)], no_request=[1])
    limits = as_set([600.0, 600.0], w, Policy())
    assert limits[0] == 600.0 and math.isnan(limits[1])
    decided = Policy().decide(Target.TIME, JobRequest(), Mode.EXTEND, 10.0, None, "v")
    assert decided.action is Action.ANNOTATE
