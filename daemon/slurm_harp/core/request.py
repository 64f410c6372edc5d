"""What slurmctld knows about a job at submit time, in plain units with None for "not given"."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from slurm_harp.core.text import LOWERED_FIELDS, MAX_TEXT_BYTES, bounded_text, lowered

# A request of this many units or more counts as not given (requested: None). Below it a float holds
# every integer, so policy's float comparison and cap (core.policy) never round a request up: at
# 2**60 + 200 MB the float was 2**60 + 256, and a rewrite with min_gain 0 set 56 MB more than asked.
# Per-CPU memory is bounded by its product with the CPUs; the quotient by the nodes of a product
# below it rounds to no integer above the exact one. No Slurm request comes near (the plugin caps
# each field here; 2**53 MB is 8 ZiB).
EXACT_REQUESTS = 2**53


class Target(StrEnum):
    """A quantity slurm-harp predicts. Units: time in minutes, memory in MB per node, cpus in CPUs."""

    TIME = "time"
    MEMORY = "memory"
    CPUS = "cpus"


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One job as submitted. Training builds these from accounting records, the daemon from gRPC.

    Keeping one type for both sides is what makes live features equal training features.
    """

    user_name: str | None = None
    user_id: int | None = None
    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    job_name: str | None = None
    work_dir: str | None = None
    script_signature: str | None = None
    time_limit_minutes: int | None = None
    time_min_minutes: int | None = None
    mem_per_node_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    min_cpus: int | None = None
    cpus_per_task: int | None = None
    num_tasks: int | None = None
    min_nodes: int | None = None
    gpus_per_node: int | None = None
    tres_per_node: str | None = None
    is_array: bool | None = None
    submit_time: int | None = None  # unix seconds
    # The limit slurmctld gives the job when it has none of its own (its partition's DefaultTime,
    # else MaxTime; the plugin sends it only then). Accounting records that limit as the job's, so
    # training's requests (from sacct) have it in time_limit_minutes and never this.
    default_time_limit_minutes: int | None = None
    # The memory slurmctld gives the job when it asks none (DefMemPerCPU or DefMemPerNode, its
    # partition's else slurm.conf's: core.memory_default; the daemon fills it in, the plugin cannot
    # read slurm.conf's). Accounting records it as the job's ReqMem, so training's requests have it
    # in mem_per_node_mb and never these. 0 per node: no default, all of a node's memory.
    default_mem_per_cpu_mb: int | None = None
    default_mem_per_node_mb: int | None = None
    # One node's memory in the job's partition, which a job gets and accounting records where it
    # asks all of it (--mem=0, --mem-per-cpu=0, or no memory and no default); the daemon fills it in.
    node_mem_mb: int | None = None

    def __post_init__(self) -> None:
        # One rule for every string, whoever builds the request (core.text): a name keys the same
        # history and hashes to the same feature from sacct, the plugin, a trace or the command line.
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None and not (value.isascii() and len(value) <= MAX_TEXT_BYTES):
                object.__setattr__(self, name, bounded_text(value))
        for name in LOWERED_FIELDS:  # account and QOS: in lower case, as accounting keeps them
            value = getattr(self, name)
            if value is not None and not value.islower():
                object.__setattr__(self, name, lowered(value))

    @property
    def user_key(self) -> str | None:
        """The user as features and history name them: the name, else the numeric id as text."""
        if self.user_name is not None:
            return self.user_name
        return None if self.user_id is None else str(self.user_id)

    @property
    def effective_time_limit_minutes(self) -> int | None:
        """The time limit the job runs under: the user's own, else the partition's default that
        slurmctld fills in after submission, which accounting then records as the job's limit.
        What features and decision weights read, so that a job submitted without ``--time`` looks
        at serving as its accounting record looks to training. Not a request of the user's:
        ``requested`` (what policy may lower) stays None for such a job."""
        own = self.time_limit_minutes
        return self.default_time_limit_minutes if own is None else own

    @property
    def asks_memory(self) -> bool:
        """Whether the user gave a memory request (--mem, --mem-per-cpu; --mem=0 too)."""
        return self.mem_per_node_mb is not None or self.mem_per_cpu_mb is not None

    def requested(self, target: Target) -> float | None:
        """The user's own request for ``target`` in the target's unit, or None if not given (or
        EXACT_REQUESTS or more: no float holds every such request exactly)."""
        own: int | None
        if target is Target.TIME:
            own = self.time_limit_minutes
        elif target is not Target.MEMORY:
            own = self.min_cpus
        elif self.mem_per_node_mb is not None:
            own = self.mem_per_node_mb or None  # 0: all of a node's memory, no number of MB to lower
        elif self.mem_per_cpu_mb == 0:
            return None
        elif self.mem_per_cpu_mb is not None and self.min_cpus is not None:
            total = self.mem_per_cpu_mb * self.min_cpus
            return total / max(self.min_nodes or 1, 1) if total < EXACT_REQUESTS else None
        else:
            own = None
        return float(own) if own is not None and own < EXACT_REQUESTS else None


_TEXT_FIELDS = tuple(name for name, kind in JobRequest.__annotations__.items() if kind == "str | None")
