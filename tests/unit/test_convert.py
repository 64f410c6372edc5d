from __future__ import annotations

import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, Reason, TargetDecision
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.text import MAX_TEXT_BYTES
from slurm_harp.server.convert import decision_to_proto, request_from_proto, request_to_proto


def test_request_round_trip_keeps_not_given_absent() -> None:
    req = JobRequest(user_name="alice", time_limit_minutes=0, min_cpus=4, is_array=False, submit_time=1)
    msg = request_to_proto(req)
    assert not msg.HasField("account") and msg.HasField("time_limit_minutes")
    assert request_from_proto(msg) == req


def test_the_partition_s_default_limit_travels_beside_a_missing_limit() -> None:
    req = JobRequest(partition="short", default_time_limit_minutes=2880, submit_time=1)
    msg = request_to_proto(req)
    assert msg.default_time_limit_minutes == 2880 and not msg.HasField("time_limit_minutes")
    assert request_from_proto(msg) == req
    assert req.effective_time_limit_minutes == 2880 and req.requested(Target.TIME) is None
    assert not request_to_proto(JobRequest()).HasField("default_time_limit_minutes")


def test_huge_strings_are_capped_in_bytes_as_the_plugin_and_the_harvest_cap_them() -> None:
    msg = pb.SubmitRequest(job_name="x" * 100_000, work_dir="/é" * 100_000)
    request = request_from_proto(msg)
    assert request.job_name == "x" * MAX_TEXT_BYTES
    assert request.work_dir == "/é" * (MAX_TEXT_BYTES // 3) + "/" * min(MAX_TEXT_BYTES % 3, 1)


def test_decision_maps_every_reason() -> None:
    for reason in Reason:
        out = decision_to_proto(Decision(targets=(TargetDecision(Target.TIME, Action.NONE, reason),)))
        assert pb.Reason.Name(out.targets[0].reason) == "REASON_" + reason.name


def test_decision_optional_fields() -> None:
    d = Decision(
        targets=(TargetDecision(Target.TIME, Action.REWRITE, predicted=44.2, quantile=0.9, new_value=45),),
        user_message="m",
        annotation="harp:x",
        mode="rewrite",
    )
    out = decision_to_proto(d)
    t = out.targets[0]
    assert (t.target, t.action, t.new_value, out.mode) == (pb.TARGET_TIME, pb.ACTION_REWRITE, 45, "rewrite")
    none = decision_to_proto(Decision(targets=(TargetDecision(Target.CPUS, Action.NONE),))).targets[0]
    assert not none.HasField("new_value") and not none.HasField("predicted")


@pytest.mark.parametrize(
    ("field", "sentinel", "kept"),
    [
        ("time_limit_minutes", 0xFFFFFFFE, 0xFFFFFFFD),  # NO_VAL
        ("time_limit_minutes", 0xFFFFFFFF, 0xFFFFFFFD),  # INFINITE
        ("time_min_minutes", 0xFFFFFFFE, 0xFFFFFFFD),
        ("default_time_limit_minutes", 0xFFFFFFFE, 0xFFFFFFFD),  # a partition without DefaultTime
        ("default_time_limit_minutes", 0xFFFFFFFF, 0xFFFFFFFD),  # nor MaxTime
        ("min_cpus", 0xFFFFFFFE, 0xFFFFFFFD),
        ("num_tasks", 0xFFFFFFFF, 0xFFFFFFFD),
        ("min_nodes", 0xFFFFFFFE, 0xFFFFFFFD),
        ("cpus_per_task", 0xFFFE, 0xFFFD),  # NO_VAL16
        ("user_id", 0xFFFFFFFE, 0xFFFFFFFD),
        ("mem_per_node_mb", 2**64 - 2, 2**63 - 1),  # NO_VAL64
        ("mem_per_cpu_mb", 2**63 + 4000, 2**63 - 1),  # MEM_PER_CPU flag bit
    ],
)
def test_slurm_s_not_given_sentinels_are_absent(field: str, sentinel: int, kept: int) -> None:
    """A client sending job_desc's values as they are: NO_VAL minutes is no time limit, never one
    to cut to the prediction (it could then be above the partition's default the job would get)."""

    def read(value: int) -> object:
        msg = pb.SubmitRequest()
        setattr(msg, field, value)
        return getattr(request_from_proto(msg), field)

    assert read(sentinel) is None
    assert read(kept) == kept
