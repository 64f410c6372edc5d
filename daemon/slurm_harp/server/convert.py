"""Mapping between harp.v1 protobuf messages and the core's plain types."""

from __future__ import annotations

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, Reason
from slurm_harp.core.request import JobRequest, Target

# The strings of a request need no cap here: JobRequest cuts them by the rule sacct's are cut by (core.text).
_STRINGS = (
    "user_name",
    "account",
    "partition",
    "qos",
    "job_name",
    "work_dir",
    "script_signature",
    "tres_per_node",
)
_INTS = (
    "user_id",
    "time_limit_minutes",
    "time_min_minutes",
    "mem_per_node_mb",
    "mem_per_cpu_mb",
    "min_cpus",
    "cpus_per_task",
    "num_tasks",
    "min_nodes",
    "gpus_per_node",
    "submit_time",
)
_TARGET = {
    Target.TIME: pb.TARGET_TIME,
    Target.MEMORY: pb.TARGET_MEMORY,
    Target.CPUS: pb.TARGET_CPUS,
}
_ACTION = {
    Action.NONE: pb.ACTION_NONE,
    Action.ANNOTATE: pb.ACTION_ANNOTATE,
    Action.REWRITE: pb.ACTION_REWRITE,
    Action.SET_TIME_MIN: pb.ACTION_SET_TIME_MIN,
}
_REASON = {reason: pb.Reason.Value("REASON_" + reason.name) for reason in Reason}


def request_from_proto(msg: pb.SubmitRequest) -> JobRequest:
    values: dict[str, object] = {}
    for name in _STRINGS:
        if msg.HasField(name):
            values[name] = getattr(msg, name)
    for name in _INTS:
        if msg.HasField(name):
            values[name] = int(getattr(msg, name))
    if msg.HasField("is_array"):
        values["is_array"] = msg.is_array
    return JobRequest(**values)  # type: ignore[arg-type]


def request_to_proto(request: JobRequest) -> pb.SubmitRequest:
    """For tools and tests that speak to the daemon."""
    fields = {name: getattr(request, name) for name in (*_STRINGS, *_INTS, "is_array")}
    return pb.SubmitRequest(**{k: v for k, v in fields.items() if v is not None})


def decision_to_proto(decision: Decision) -> pb.Decision:
    out = pb.Decision(user_message=decision.user_message, annotation=decision.annotation, mode=decision.mode)
    for t in decision.targets:
        item = out.targets.add(
            target=_TARGET[t.target],
            action=_ACTION[t.action],
            reason=_REASON[t.reason],
            model_version=t.model_version,
            detail=t.detail,
        )
        if t.predicted is not None:
            item.predicted = t.predicted
        if t.quantile is not None:
            item.quantile = t.quantile
        if t.new_value is not None:
            item.new_value = t.new_value
    return out
