"""The time_min and extend modes in the core: policy, predictor (guard heartbeat, opt-out), the
user's message and the tag the guard reads back."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_harp.core.decision import Action, Reason, TargetDecision
from slurm_harp.core.history import HistoryIndex
from slurm_harp.core.job import JobRecord
from slurm_harp.core.key_history import outcome_of
from slurm_harp.core.message import user_message_for
from slurm_harp.core.policy import Mode, Policy, Rule
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.tag import annotation_for, as_submitted, parse_tag
from tests.conftest import for_target
from tests.unit.test_predictor import FakeModel, vectorize


class Guard:
    def __init__(self, alive: bool) -> None:
        self.is_alive = alive

    def alive(self) -> bool:
        return self.is_alive


def predictor(mode: Mode, alive: bool = True, minutes: float = 40.0, **policy: object) -> Predictor:
    models = {t: FakeModel(minutes, version=f"{t.value}@1") for t in Target}
    return Predictor(Policy(default_mode=mode, **policy), vectorize, models, guard=Guard(alive))  # type: ignore[arg-type]


JOB = JobRequest(user_name="alice", time_limit_minutes=600, mem_per_node_mb=64000, min_cpus=8)


def test_extend_cuts_the_time_limit_only_and_records_the_request() -> None:
    d = predictor(Mode.EXTEND).decide(JOB)
    time = for_target(d, Target.TIME)
    assert time is not None and time.action is Action.REWRITE and time.new_value == 40
    assert [for_target(d, t).action for t in (Target.MEMORY, Target.CPUS)] == [Action.ANNOTATE] * 2  # type: ignore[union-attr]
    assert d.mode == "extend"
    tag = parse_tag(d.annotation)
    assert tag is not None and tag.mode == "extend" and tag.extendable_minutes == 600
    assert tag.values["t"] == 40 and tag.flags["t"] == "!"
    assert "extended up to 10:00:00" in d.user_message and "00:40:00" in d.user_message


def test_time_min_sets_time_min_and_keeps_the_limit() -> None:
    d = predictor(Mode.TIME_MIN).decide(JOB)
    time = for_target(d, Target.TIME)
    assert time is not None and time.action is Action.SET_TIME_MIN and time.new_value == 40
    tag = parse_tag(d.annotation)
    assert tag is not None and tag.flags["t"] == "~" and tag.extendable_minutes == 600
    assert "time_min set to 00:40:00" in d.user_message
    # The user's own time_min is theirs: annotated only.
    own = predictor(Mode.TIME_MIN).decide(JobRequest(time_limit_minutes=600, time_min_minutes=100))
    assert for_target(own, Target.TIME).action is Action.ANNOTATE  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", list(Mode))
def test_memory_and_cpus_change_only_in_rewrite_mode(mode: Mode) -> None:
    """README.md, Modes: "Memory and CPUs change only in rewrite mode"."""
    d = predictor(mode, minutes=2.0).decide(JOB)  # 2 MB, 2 CPUs: far below what the job asks
    actions = {for_target(d, t).action for t in (Target.MEMORY, Target.CPUS)}  # type: ignore[union-attr]
    assert actions == {{Mode.REWRITE: Action.REWRITE, Mode.OFF: Action.NONE}.get(mode, Action.ANNOTATE)}


def test_a_dead_guard_means_annotate_and_says_so() -> None:
    for mode in (Mode.EXTEND, Mode.TIME_MIN):
        d = predictor(mode, alive=False).decide(JOB)
        time = for_target(d, Target.TIME)
        assert time is not None and time.action is Action.ANNOTATE and time.reason is Reason.GUARD_DOWN
        assert d.mode == "shadow"
        assert "not running" in d.user_message
        tag = parse_tag(d.annotation)
        assert tag is not None and tag.extendable_minutes is None  # nothing for a guard to extend
    # Without any heartbeat source at all, the same.
    models = {Target.TIME: FakeModel(40.0)}
    lonely = Predictor(Policy(default_mode=Mode.EXTEND), vectorize, models).decide(JOB)
    assert for_target(lonely, Target.TIME).reason is Reason.GUARD_DOWN  # type: ignore[union-attr]
    # Rewrite mode does not depend on the guard.
    rewrite = predictor(Mode.REWRITE, alive=False).decide(JOB)
    assert for_target(rewrite, Target.TIME).action is Action.REWRITE  # type: ignore[union-attr]


def test_opted_out_users_and_accounts_are_left_alone() -> None:
    p = predictor(Mode.EXTEND, opt_out_users=frozenset({"alice"}), opt_out_accounts=frozenset({"lab"}))
    for job in (JOB, JobRequest(user_name="bob", account="lab", time_limit_minutes=600)):
        d = p.decide(job)
        assert all(t.action is Action.NONE and t.reason is Reason.OPTED_OUT for t in d.targets)
        assert d.annotation == "" and d.user_message == "" and d.mode == "off"
    assert p.decide(JobRequest(user_name="bob", time_limit_minutes=600)).mode == "extend"


def test_a_job_without_a_user_name_is_left_alone_while_any_user_opts_out() -> None:
    """slurmctld gives no user name when it cannot resolve the uid (an NSS outage): the job may be
    an opted-out user's."""
    unnamed = JobRequest(user_id=1001, time_limit_minutes=600)
    d = predictor(Mode.REWRITE, opt_out_users=frozenset({"alice"})).decide(unnamed)
    assert d.mode == "off" and {t.reason for t in d.targets} == {Reason.OPTED_OUT}
    assert predictor(Mode.REWRITE).decide(unnamed).mode == "rewrite"  # no user opts out


def test_rules_choose_the_new_modes_per_partition() -> None:
    rules = (Rule(Mode.EXTEND, partition="short"), Rule(Mode.TIME_MIN, account="phys"))
    p = predictor(Mode.SHADOW, rules=rules)
    assert p.decide(JobRequest(partition="short", time_limit_minutes=600)).mode == "extend"
    assert p.decide(JobRequest(account="phys", time_limit_minutes=600)).mode == "time_min"


@pytest.mark.parametrize("partitions", ["critical,batch", "batch,critical", "batch,,critical"])
def test_a_job_for_several_partitions_gets_the_least_changing_of_their_modes(partitions: str) -> None:
    """Slurm may start a `-p critical,batch` job in critical: a rule keeping critical out holds."""
    p = predictor(Mode.REWRITE, rules=(Rule(Mode.OFF, partition="critical"),))
    d = p.decide(JobRequest(partition=partitions, time_limit_minutes=600))
    assert d.mode == "off" and {t.action for t in d.targets} == {Action.NONE}
    rules = (Rule(Mode.EXTEND, partition="short"), Rule(Mode.REWRITE, partition="long"))
    assert predictor(Mode.TIME_MIN, rules=rules).decide(JobRequest(partition="long,short")).mode == "extend"
    # A partition no rule names has the default mode.
    assert predictor(Mode.SHADOW, rules=rules).decide(JobRequest(partition="long,other")).mode == "shadow"


@given(asked=st.integers(1, 10**6), predicted=st.floats(0, 2e6), floor=st.floats(0, 1000))
def test_new_modes_never_raise_nor_cut_below_the_floor(asked: int, predicted: float, floor: float) -> None:
    policy = Policy(floors={Target.TIME: floor})
    for mode in (Mode.EXTEND, Mode.TIME_MIN):
        d = policy.decide(Target.TIME, JobRequest(time_limit_minutes=asked), mode, predicted, None, "v")
        if d.new_value is not None:
            assert d.new_value <= asked
            assert d.new_value >= min(asked, floor)


def test_parse_tag_reads_what_annotation_writes_and_refuses_the_rest() -> None:
    assert parse_tag(None) is None and parse_tag("") is None and parse_tag("no tag here") is None
    tag = parse_tag("jobstats:ok harp:extend,t!=40/q0.9,t0=600,m=900,v=time@1+memory@2 later:x")
    assert tag is not None
    assert tag.values == {"t": 40, "m": 900} and tag.own == {"t": 600}
    assert tag.versions == ("time@1", "memory@2")
    assert parse_tag("harp:bogus,t=1") is None  # unknown mode
    assert parse_tag("harp:extend,t!=40,t0=600;rm") is None  # malformed item: never acted on
    # A shadow tag or a rewrite (kill at the new limit) is never extendable.
    assert parse_tag("harp:shadow,t=40,v=x").extendable_minutes is None  # type: ignore[union-attr]
    assert parse_tag("harp:rewrite,t!=40,v=x").extendable_minutes is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "number", ["9" * 400, str(2**53 + 1), "0" * 17, "\u0661\u0660", "\uff14", "1_000", "+5", " 5"]
)
def test_a_tag_with_a_number_past_2_53_or_not_ascii_digits_is_no_tag(number: str) -> None:
    """400 digits parsed, and every reader that multiplies the value (the harvest's extension
    history, the guard, the daemon's history feed, training) raised OverflowError on the job."""
    assert parse_tag(f"harp:extend,t!={number},t0=600,v=x") is None
    assert parse_tag(f"harp:extend,t!=40,t0={number},v=x") is None
    largest = parse_tag(f"harp:rewrite,m!={2**53},m0={2**53},c=0000000000000001,v=x")
    assert largest is not None and largest.values == {"m": 2**53, "c": 1} and largest.own == {"m": 2**53}


def test_an_annotated_prediction_past_2_53_is_written_as_a_tag_parse_tag_reads() -> None:
    """A linear model's raw prediction of 1e16 MB was written as it came, and parse_tag then read
    the whole tag as none: the time cut beside it (t!=55,t0=120) was never extended by the guard."""
    request = JobRequest(user_name="alice", time_limit_minutes=120, mem_per_node_mb=4000)
    targets = [
        TargetDecision(Target.TIME, Action.REWRITE, predicted=50.0, new_value=55, model_version="t@1"),
        TargetDecision(Target.MEMORY, Action.ANNOTATE, predicted=1e16, model_version="m@1"),
    ]
    tag = parse_tag(annotation_for(Mode.EXTEND, targets, request))
    assert tag is not None and tag.values == {"t": 55, "m": 2**53} and tag.own == {"t": 120}
    below = [targets[0], TargetDecision(Target.MEMORY, Action.ANNOTATE, predicted=-3.0, model_version="m@1")]
    tag = parse_tag(annotation_for(Mode.EXTEND, below, request))  # a negative one made no tag either
    assert tag is not None and tag.values == {"t": 55, "m": 0} and tag.own == {"t": 120}


def test_the_users_line_says_each_value_whole_and_each_cut_by_its_own_rule() -> None:
    """Found by an audit: a terabyte node's memory read 1.23457e+06 MB (not what was set), a 0.995
    quantile read 100 %, and a time cut by the calibrated rule beside a memory cut by a quantile
    was credited to that quantile."""
    request = JobRequest(user_name="alice", time_limit_minutes=600, mem_per_node_mb=1536000)
    time = TargetDecision(Target.TIME, Action.REWRITE, predicted=38.0, new_value=40, model_version="t@1")
    memory = TargetDecision(
        Target.MEMORY,
        Action.REWRITE,
        predicted=1234566.2,
        quantile=0.9,
        new_value=1234567,
        model_version="m@1",
    )
    assert user_message_for(request, Mode.REWRITE, [memory]) == (
        "harp: lowered memory from 1536000 MB to 1234567 MB (90% of similar past jobs finished within it)."
    )
    for quantile, said in ((0.995, "99.5%"), (0.99995, "99.99%"), (0.29, "29%")):
        high = replace(memory, quantile=quantile)
        assert f"({said} of similar past jobs finished" in user_message_for(request, Mode.REWRITE, [high])
    averaged = JobRequest(user_name="alice", mem_per_cpu_mb=1000, min_cpus=4, min_nodes=3)
    cut = TargetDecision(Target.MEMORY, Action.REWRITE, predicted=900.0, new_value=1000, model_version="m@1")
    assert "memory from 1333.33 MB to 1000 MB" in user_message_for(averaged, Mode.REWRITE, [cut])
    assert user_message_for(request, Mode.REWRITE, [time, memory]) == (
        "harp: lowered time from 10:00:00 to 00:40:00 (calibrated on similar past jobs), memory from "
        "1536000 MB to 1234567 MB (90% of similar past jobs finished within it)."
    )


def test_the_history_feed_and_training_read_a_tag_past_2_53_as_no_tag() -> None:
    """They read a job's own limit through as_submitted (parse_tag): t0 of 400 digits raised
    OverflowError in the daemon's history index (outcome_of) and in training's features."""
    request = JobRequest(user_name="alice", time_limit_minutes=60, submit_time=1000)
    job = JobRecord(
        "1", request, "COMPLETED", 600, end_time=1600, harp_tag=f"harp:extend,t!=10,t0={'9' * 400},v=x"
    )
    assert as_submitted(job) == job
    index = HistoryIndex()
    assert index.add(job) and index.added == 1
    assert outcome_of(job) is not None and outcome_of(job)[4] == 600 / 3600  # type: ignore[index]


@pytest.mark.parametrize("separator", ["\x1f", "\u00a0", "\u2003", "\x85"])
def test_a_tag_joined_by_other_than_ascii_whitespace_is_no_tag(separator: str) -> None:
    """The plugin strips a user's harp tokens split on ASCII whitespace (Lua's %s): what it keeps
    must not read as a tag here either."""
    assert parse_tag(f"x{separator}harp:extend,t!=1,t0=99999,v=forged") is None
    assert parse_tag("x\tharp:extend,t!=1,t0=600,v=a\ny").own == {"t": 600}  # type: ignore[union-attr]
