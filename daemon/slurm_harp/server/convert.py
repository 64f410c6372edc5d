"""Mapping between harp.v1 protobuf messages and the core's plain types."""

from __future__ import annotations

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, Reason
from slurm_harp.core.memory_default import MemoryDefaults
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.text import MAX_TEXT_BYTES

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
# Slurm's "not given" sentinels (slurm.h NO_VAL, INFINITE, NO_VAL16, NO_VAL64): a client that sends
# one as it found it in job_desc means no value, and e.g. a time limit of NO_VAL minutes cut to the
# prediction could be above the partition's DefaultTime the job would have had. The memory fields
# also refuse Slurm's MEM_PER_CPU flag bit: no MB count is that large. From this value on: absent.
_NO_VAL, _NO_VAL16 = 0xFFFFFFFE, 0xFFFE
_INTS: dict[str, int | None] = {
    "user_id": _NO_VAL,
    "time_limit_minutes": _NO_VAL,
    "time_min_minutes": _NO_VAL,
    "mem_per_node_mb": 1 << 63,
    "mem_per_cpu_mb": 1 << 63,
    "min_cpus": _NO_VAL,
    "cpus_per_task": _NO_VAL16,
    "num_tasks": _NO_VAL,
    "min_nodes": _NO_VAL,
    "gpus_per_node": _NO_VAL,
    "submit_time": None,
    "default_time_limit_minutes": _NO_VAL,
}
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


class PartitionListTooLong(ValueError):
    """A partition list longer than a request carries (MAX_TEXT_BYTES of UTF-8). JobRequest would cut
    it, and the per-partition rules (core.policy's least changing mode of the partitions listed)
    would then miss the partitions past the cut: a job that may run in an `off` partition named
    last was rewritten. The plugin leaves such a job alone without asking (faults.md); a Predict
    call from any other client is answered with no action (bad_request) instead."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"a partition list of {size} bytes, over the {MAX_TEXT_BYTES} a request carries: its "
            "per-partition rules would see only those before the cut"
        )


def submit_request(msg: pb.SubmitRequest, memory: MemoryDefaults | None = None) -> JobRequest:
    """The JobRequest a Predict call asks about: request_from_proto, or PartitionListTooLong."""
    if msg.HasField("partition"):
        listed = msg.partition
        size = len(listed) if listed.isascii() else len(listed.encode("utf-8", "surrogatepass"))
        if size > MAX_TEXT_BYTES:
            raise PartitionListTooLong(size)
    return request_from_proto(msg, memory)


def request_from_proto(msg: pb.SubmitRequest, memory: MemoryDefaults | None = None) -> JobRequest:
    """The request ``msg`` carries, with the memory ``memory`` says slurmctld gives it where it asks
    none or all of a node's (core.memory_default)."""
    values: dict[str, object] = {}
    for name in _STRINGS:
        if msg.HasField(name):
            values[name] = getattr(msg, name)
    for name, absent_from in _INTS.items():
        if msg.HasField(name):
            value = getattr(msg, name)
            if absent_from is None or value < absent_from:
                values[name] = int(value)
    if msg.HasField("is_array"):
        values["is_array"] = msg.is_array
    if memory is not None:
        asks = "mem_per_node_mb" in values or "mem_per_cpu_mb" in values  # JobRequest.asks_memory
        values.update(memory.request_fields(msg.partition if msg.HasField("partition") else None, asks))
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
