"""The memory slurmctld gives a job that asks none, as accounting then records it (ReqMem).

slurmctld fills in a job without ``--mem`` or ``--mem-per-cpu`` after the job_submit plugins ran:
its partition's DefMemPerCPU or DefMemPerNode, else slurm.conf's, times its CPUs for a per-CPU
default. Accounting keeps that as the job's ReqMem, so every job training reads has a memory
request; the plugin sees none, and slurm.conf's default is not in what job_submit.lua may read
(part_list shows a partition's own only). The daemon reads both with scontrol
(server.slurm_memory_defaults) and fills them in for the features (core.features), so that a job
submitted without memory looks at serving as its accounting record looks to training. Policy never
sees them: harp lowers no memory the user did not ask for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["MemoryDefault", "MemoryDefaults"]


@dataclass(frozen=True, slots=True)
class MemoryDefault:
    """One default: MB per allocated CPU, or MB per node (Slurm has one or the other)."""

    per_cpu_mb: int | None = None
    per_node_mb: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryDefaults:
    """slurm.conf's default (None: none, a job then gets a whole node's memory, and accounting
    records none) and the partitions that set their own."""

    cluster: MemoryDefault | None = None
    partitions: Mapping[str, MemoryDefault] = field(default_factory=dict)

    def for_partitions(self, names: str | None) -> MemoryDefault | None:
        """The default of a job submitted to ``names`` (a partition, or a list "a,b"): each one's
        own, else slurm.conf's. Where the partitions of a list differ, or no partition is named
        and some partition has one of its own, None: which the job gets is not known yet."""
        if not names:
            return self.cluster if not self.partitions else None
        found = {self.partitions.get(name, self.cluster) for name in names.split(",") if name}
        return found.pop() if len(found) == 1 else None

    def request_fields(self, names: str | None) -> dict[str, int]:
        """The JobRequest fields (``default_mem_per_cpu_mb`` or ``default_mem_per_node_mb``) of a
        job submitted to ``names`` that asks no memory; none where its default is not known. For
        the request as it is built (server.convert): a request built again costs more than the
        daemon's whole work for some jobs."""
        default = self.for_partitions(names)
        if default is None:
            return {}
        if default.per_cpu_mb is not None:
            return {"default_mem_per_cpu_mb": default.per_cpu_mb}
        return {} if default.per_node_mb is None else {"default_mem_per_node_mb": default.per_node_mb}
