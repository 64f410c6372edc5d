from __future__ import annotations

from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from slurm_harp.core.decision import Action, Reason
from slurm_harp.core.policy import DEFAULT_FLOORS, Mode, Policy, Rule
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


def test_a_floor_of_0_never_proposes_0() -> None:
    """A floor of 0 is accepted: a prediction at or below 0 proposed 0, which the plugin refuses to
    set (0 MB is all of a node's memory), logging each such job at info."""
    policy = Policy(floors=dict.fromkeys(Target, 0.0))
    req = JobRequest(time_limit_minutes=120, min_cpus=4, mem_per_node_mb=4000)
    for target in Target:
        for predicted in (-3.0, 0.0, 0.2):
            decision = policy.decide(target, req, Mode.REWRITE, predicted, 0.9, "v")
            assert (decision.action, decision.new_value) == (Action.REWRITE, 1), (target, predicted)


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
    # With min_gain 0 the ask itself was a "rewrite" to what it was (the floor at the ask: a 10-minute
    # job and the 10-minute floor), counted as one and said to the user as "lowered from 10 to 10".
    same = Policy(min_gain=0.0).decide(
        Target.TIME, JobRequest(time_limit_minutes=10), Mode.REWRITE, 3.0, 0.9, "v"
    )
    assert (same.action, same.reason) == (Action.ANNOTATE, Reason.NO_GAIN)


def exact_ask(request: JobRequest, target: Target) -> Fraction | None:
    """The user's own ask, in no float: what no decision may raise."""
    if target is Target.TIME:
        return None if request.time_limit_minutes is None else Fraction(request.time_limit_minutes)
    if target is Target.CPUS:
        return None if request.min_cpus is None else Fraction(request.min_cpus)
    if request.mem_per_node_mb is not None:
        return Fraction(request.mem_per_node_mb)
    if request.mem_per_cpu_mb is None or request.min_cpus is None:
        return None
    return Fraction(request.mem_per_cpu_mb * request.min_cpus, max(request.min_nodes or 1, 1))


U32 = st.integers(0, 2**32 - 1)
MB = st.integers(0, 2**63 - 1)  # what request_from_proto lets through
HUGE = 2**60 + 200  # its float is 2**60 + 256


@st.composite
def requests(draw: st.DrawFn) -> JobRequest:
    return JobRequest(
        time_limit_minutes=draw(st.none() | U32),
        time_min_minutes=draw(st.none() | U32),
        mem_per_node_mb=draw(st.none() | MB),
        mem_per_cpu_mb=draw(st.none() | MB | st.integers(2**50, 2**53)),
        min_cpus=draw(st.none() | U32),
        min_nodes=draw(st.none() | U32),
    )


@settings(max_examples=300, deadline=None)
@given(
    request=requests(),
    target=st.sampled_from(list(Target)),
    mode=st.sampled_from([Mode.REWRITE, Mode.EXTEND, Mode.TIME_MIN]),
    predicted=st.floats(min_value=-1e30, max_value=1e30, allow_nan=False) | MB.map(float),
    gain=st.sampled_from([0.0, 0.1, 0.5]) | st.floats(min_value=0, max_value=0.99),
    floor=st.sampled_from([0.0, 1.0, 10.0, 1024.0]) | st.floats(min_value=0, max_value=1e5),
)
# Asks past 2**53 whose float is above them: a prediction at that float was set, above the ask.
@example(JobRequest(mem_per_node_mb=HUGE), Target.MEMORY, Mode.REWRITE, float(HUGE), 0.0, 1024.0)
@example(
    JobRequest(mem_per_cpu_mb=HUGE // 8, min_cpus=8), Target.MEMORY, Mode.REWRITE, float(HUGE), 0.0, 1024.0
)
@example(
    JobRequest(mem_per_cpu_mb=2**53 - 1, min_cpus=1, min_nodes=5), Target.MEMORY, Mode.REWRITE, 2e15, 0.0, 0.0
)
def test_rewrite_never_raises_nor_cuts_below_floor(
    request: JobRequest, target: Target, mode: Mode, predicted: float, gain: float, floor: float
) -> None:
    """Every target, per-node and per-CPU memory, the modes that change a job, any floor and gain:
    a value set is at most the exact ask and at least the floor."""
    policy = Policy(default_mode=mode, min_gain=gain, floors={**DEFAULT_FLOORS, target: floor})
    d = policy.decide(target, request, mode, predicted, 0.9, "v")
    if d.action in (Action.REWRITE, Action.SET_TIME_MIN):
        asked = exact_ask(request, target)
        assert d.new_value is not None and asked is not None
        assert d.new_value <= asked, (d.new_value, asked)
        assert d.new_value >= floor
    else:
        assert d.new_value is None


def test_an_ask_past_the_integers_a_float_holds_is_not_given() -> None:
    """Past 2**53 the policy's float would round it; a memory ask of 8 ZiB is no ask anyone makes."""
    assert JobRequest(mem_per_node_mb=2**53 - 1).requested(Target.MEMORY) == 2**53 - 1
    assert JobRequest(mem_per_node_mb=2**53).requested(Target.MEMORY) is None
    assert JobRequest(mem_per_cpu_mb=2**50, min_cpus=8, min_nodes=8).requested(Target.MEMORY) is None
    assert JobRequest(time_limit_minutes=2**53).requested(Target.TIME) is None
    huge = Policy(min_gain=0.0).decide(
        Target.MEMORY, JobRequest(mem_per_node_mb=HUGE), Mode.REWRITE, float(HUGE), 0.9, "v"
    )
    assert (huge.action, huge.reason, huge.new_value) == (Action.ANNOTATE, Reason.NOT_REQUESTED, None)


def test_memory_request_per_cpu_is_converted_to_per_node() -> None:
    req = JobRequest(mem_per_cpu_mb=2000, min_cpus=8, min_nodes=2)
    assert req.requested(Target.MEMORY) == 8000.0
    assert JobRequest(mem_per_node_mb=500).requested(Target.MEMORY) == 500.0
    assert JobRequest().requested(Target.MEMORY) is None
