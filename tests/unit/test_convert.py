from __future__ import annotations

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


def test_huge_strings_are_capped_in_bytes_as_the_plugin_and_the_harvest_cap_them() -> None:
    msg = pb.SubmitRequest(job_name="x" * 100_000, work_dir="/é" * 100_000)
    request = request_from_proto(msg)
    assert request.job_name == "x" * MAX_TEXT_BYTES
    assert request.work_dir == "/é" * (MAX_TEXT_BYTES // 3) + "/"


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
