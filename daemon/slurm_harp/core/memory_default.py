"""The memory slurmctld gives a job that names no number of MB, as accounting then records it (ReqMem).

slurmctld fills in a job without ``--mem`` or ``--mem-per-cpu`` after the job_submit plugins ran:
its partition's DefMemPerCPU or DefMemPerNode, else slurm.conf's, times its CPUs for a per-CPU
default. Where neither sets one, and for ``--mem=0`` or ``--mem-per-cpu=0``, the job gets all of a
node's memory, and accounting records that node's memory. Either way every job training reads has a
memory request; the plugin sees none (or a 0), and slurm.conf's default and the nodes' memory are
not in what job_submit.lua may read (part_list shows a partition's own default only). The daemon
reads them with scontrol (server.slurm_memory_defaults) and fills them in for the features
(core.features), so that such a job looks at serving as its accounting record looks to training.
Policy never sees them: harp lowers no memory the user did not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["MAX_LISTS", "WHOLE_NODE", "MemoryDefault", "MemoryDefaults", "PartitionMemory"]

MAX_LISTS = 1024  # partition lists whose fields are kept resolved; others are resolved each time


@dataclass(frozen=True, slots=True)
class MemoryDefault:
    """One default: MB per allocated CPU, or MB per node (Slurm has one or the other)."""

    per_cpu_mb: int | None = None
    per_node_mb: int | None = None

    def request_fields(self) -> dict[str, int]:
        if self.per_cpu_mb is not None:
            return {"default_mem_per_cpu_mb": self.per_cpu_mb}
        return {} if self.per_node_mb is None else {"default_mem_per_node_mb": self.per_node_mb}


# No default anywhere (DefMemPerNode=UNLIMITED): all of a node's memory, as --mem=0 asks.
WHOLE_NODE = MemoryDefault(per_node_mb=0)


@dataclass(frozen=True, slots=True)
class PartitionMemory:
    """What a job of one partition gets when it names no number of MB."""

    default: MemoryDefault = WHOLE_NODE  # its own default, else slurm.conf's, else a whole node
    # What a job gets of one of its nodes (RealMemory less MemSpecLimit): exact where the nodes are
    # alike, their mean where not; None where scontrol shows none (a partition without nodes).
    node_mb: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryDefaults:
    """Every partition's, as scontrol showed them; none known yet is empty."""

    cluster: MemoryDefault = WHOLE_NODE  # slurm.conf's, for the log
    partitions: Mapping[str, PartitionMemory] = field(default_factory=dict)
    default_partition: str | None = None  # Default=YES: where a job naming none goes

    # Each partition list's fields, as they were resolved (request_fields), for the lists seen
    # first: a lookup, where resolving took a fifth of the request's conversion.
    _fields: dict[str | None, tuple[dict[str, int], dict[str, int]]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def request_fields(self, names: str | None, asks_memory: bool) -> dict[str, int]:
        """The JobRequest fields of a job submitted to ``names`` (a partition, a list "a,b", or
        None for the default partition): ``node_mem_mb``, and for a job that asks no memory (not
        ``asks_memory``) ``default_mem_per_cpu_mb`` or ``default_mem_per_node_mb`` (0: a whole
        node). Each only where the partitions of a list agree: which one the job gets is not known
        at submission. For the request as it is built (server.convert), which copies them: a
        request built again costs more than the daemon's whole work for some jobs."""
        resolved = self._fields.get(names)
        if resolved is None:
            resolved = self._resolve(names)
            if len(self._fields) < MAX_LISTS:  # the lists a client sends are its to choose
                self._fields[names] = resolved
        return resolved[0] if asks_memory else resolved[1]

    def _resolve(self, names: str | None) -> tuple[dict[str, int], dict[str, int]]:
        """request_fields of ``names``: (for a job asking memory, for one asking none)."""
        found = []
        for name in names.split(",") if names else [self.default_partition]:
            partition = self.partitions.get(name) if name else None
            if partition is None:  # a partition the reading does not know
                return {}, {}
            found.append(partition)
        nodes = {p.node_mb for p in found}
        node_mb = nodes.pop() if len(nodes) == 1 else None
        asks = {} if node_mb is None else {"node_mem_mb": node_mb}
        defaults = {p.default for p in found}
        asks_none = asks | defaults.pop().request_fields() if len(defaults) == 1 else asks
        return asks, asks_none
