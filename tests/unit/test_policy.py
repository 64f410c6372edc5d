from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from slurm_harp.core.decision import Action, Reason
from slurm_harp.core.policy import Mode, Policy, Rule
from slurm_harp.core.request import JobRequest, Target


def test_first_matching_rule_wins_else_default() -> None:
    policy = Policy(
        default_mode=Mode.SHADOW,
        rules=(
            Rule(Mode.REWRITE, partition="debug", account="research"),
            Rule(Mode.OFF, partition="debug"),
        ),
    )
    assert policy.mode_for(JobRequest(partition="debug", account="research")) is Mode.REWRITE
    assert policy.mode_for(JobRequest(partition="debug", account="teaching")) is Mode.OFF
    assert policy.mode_for(JobRequest(partition="batch")) is Mode.SHADOW


def test_shadow_annotates_and_off_does_nothing() -> None:
    req = JobRequest(time_limit_minutes=240)
    shadow = Policy().decide(Target.TIME, req, Mode.SHADOW, 30.0, 0.9, "v1")
    assert (shadow.action, shadow.reason, shadow.new_value) == (Action.ANNOTATE, Reason.SHADOW, None)
    off = Policy().decide(Target.TIME, req, Mode.OFF, 30.0, 0.9, "v1")
    assert (off.action, off.reason) == (Action.NONE, Reason.POLICY_OFF)


def test_rewrite_rounds_up_and_respects_floor() -> None:
    policy = Policy(floors={Target.TIME: 10.0})
    req = JobRequest(time_limit_minutes=240)
    assert policy.decide(Target.TIME, req, Mode.REWRITE, 44.2, 0.9, "v").new_value == 45
    assert policy.decide(Target.TIME, req, Mode.REWRITE, 1.0, 0.9, "v").new_value == 10


def test_no_rewrite_without_a_request_or_without_gain() -> None:
    policy = Policy(min_gain=0.1)
    unasked = policy.decide(Target.TIME, JobRequest(), Mode.REWRITE, 30.0, 0.9, "v")
    assert (unasked.action, unasked.reason) == (Action.ANNOTATE, Reason.NOT_REQUESTED)
    # The partition's default a request carries for the features is no request of the user's: a job
    # without --time keeps its default in every changing mode, whatever the prediction.
    for mode in (Mode.REWRITE, Mode.EXTEND, Mode.TIME_MIN):
        defaulted = policy.decide(
            Target.TIME, JobRequest(default_time_limit_minutes=2880), mode, 30.0, 0.9, "v"
        )
        assert (defaulted.action, defaulted.reason, defaulted.new_value) == (
            Action.ANNOTATE,
            Reason.NOT_REQUESTED,
            None,
        )
    small = policy.decide(Target.TIME, JobRequest(time_limit_minutes=60), Mode.REWRITE, 58.0, 0.9, "v")
    assert (small.action, small.reason) == (Action.ANNOTATE, Reason.NO_GAIN)


@given(
    asked=st.integers(min_value=0, max_value=10**7),
    predicted=st.floats(min_value=0, max_value=1e9, allow_nan=False),
    floor=st.floats(min_value=0, max_value=1e5, allow_nan=False),
    gain=st.floats(min_value=0, max_value=0.99),
)
def test_rewrite_never_raises_nor_cuts_below_floor(
    asked: int, predicted: float, floor: float, gain: float
) -> None:
    policy = Policy(min_gain=gain, floors={Target.TIME: floor})
    d = policy.decide(Target.TIME, JobRequest(time_limit_minutes=asked), Mode.REWRITE, predicted, 0.9, "v")
    if d.action is Action.REWRITE:
        assert d.new_value is not None
        assert d.new_value <= asked
        assert d.new_value >= floor
    else:
        assert d.new_value is None


def test_memory_request_per_cpu_is_converted_to_per_node() -> None:
    req = JobRequest(mem_per_cpu_mb=2000, min_cpus=8, min_nodes=2)
    assert req.requested(Target.MEMORY) == 8000.0
    assert JobRequest(mem_per_node_mb=500).requested(Target.MEMORY) == 500.0
    assert JobRequest().requested(Target.MEMORY) is None
