"""How big a job each partition can hold, from ``scontrol show partition`` text.

The advice's candidates must be configurations the partition accepts: scontrol gives each
partition's node total (``TotalNodes``), its CPUs (the TRES's ``cpu``, less the specialized cores
that ``TotalCPUs`` counts; TotalCPUs where the TRES has none), its per-job limits
(``MinNodes``, ``MaxNodes``, ``MaxCPUsPerNode``, ``MaxMemPerNode`` or ``MaxMemPerCPU``, ``MaxTime``)
and its TRES, whose
``mem`` and ``gres/gpu`` totals give the memory and GPUs a node has (and ``gres/gpu:<type>``
the GPUs' type, which slurmctld bills by). ``OverSubscribe=EXCLUSIVE`` (``Exclusive=NODE`` or ``TOPO``
from Slurm 26.05, which then prints ``OverSubscribe=NO``) gives every job whole nodes: slurmctld
allocates, and bills, all their CPUs and GPUs (``_resolve_shared_status``). Nodes are taken as alike
(a partition's totals divided by its node count, rounded down): HARP proposes nothing a node of
average size could not hold, and Slurm refuses at submission what does not fit. A node's memory is
better read from ``scontrol show node`` (slurm_formats.node_memory_mb: RealMemory less
MemSpecLimit, which is all slurmctld gives a job), where the daemon can read it: the TRES counts
RealMemory whole. Its State and Allow/Deny fields say whom it takes jobs from (partition_access.py).
slurm.conf alone does not say how big the nodes are (that is in the NodeName lines, with host
lists); the daemon reads scontrol.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from slurm_harp.advice.partition_access import PartitionAccess
from slurm_harp.slurm_formats import (
    gpus_in_tres,
    is_unlimited,
    parse_count,
    parse_max_time,
    parse_memory_mb,
    parse_tres,
    scontrol_records,
)

__all__ = ["PartitionShape", "shape_of", "shapes_from_scontrol"]

_In = TypeVar("_In")
_Out = TypeVar("_Out")


@dataclass(frozen=True, slots=True)
class PartitionShape:
    name: str
    nodes: int = 0  # TotalNodes
    cpus: int = 0  # CPUs jobs may be given: the TRES's cpu (TotalCPUs less specialized cores)
    gpus: int = 0  # gres/gpu in the partition's TRES
    gpu_type: str | None = None  # the one gres/gpu:<type> in the TRES (None: untyped, or several)
    mem_mb: float = 0.0  # mem in the partition's TRES (0: unknown)
    # What a job may hold of one node, from scontrol show node (None: not read; the TRES then)
    node_mem_mb: float | None = None
    max_nodes: int | None = None  # MaxNodes per job (None: UNLIMITED)
    min_nodes: int = 0  # MinNodes per job: one without -N is given these
    max_cpus_per_node: int | None = None  # MaxCPUsPerNode (None: UNLIMITED)
    max_mem_per_node_mb: float | None = None  # MaxMemPerNode (None: UNLIMITED)
    max_mem_per_cpu_mb: float | None = None  # MaxMemPerCPU, printed instead of MaxMemPerNode (None: none)
    max_minutes: int | None = None  # MaxTime (None: UNLIMITED)
    # the field that gives every job whole nodes ("OverSubscribe=EXCLUSIVE"); "": jobs share nodes
    exclusive: str = ""
    access: PartitionAccess = field(default_factory=PartitionAccess)  # State, whom it takes jobs from

    @property
    def cpus_per_node(self) -> int:
        """CPUs a job may use on one node (0: unknown)."""
        per_node = self.cpus // self.nodes if self.nodes else 0
        if self.max_cpus_per_node is not None:
            per_node = min(per_node, self.max_cpus_per_node)
        return per_node

    @property
    def node_cpus(self) -> int:
        """CPUs a node has (0: unknown): what a job holding whole nodes is given, and billed, on each
        (all of them, MaxCPUsPerNode or not)."""
        return self.cpus // self.nodes if self.nodes else 0

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes if self.nodes else 0

    @property
    def mem_per_node_mb(self) -> float | None:
        """Memory a job may hold on one node (None: unknown): what the nodes give a job, else the
        partition's TRES per node, at most MaxMemPerNode."""
        per_node = self.node_mem_mb
        if per_node is None and self.nodes and self.mem_mb:
            per_node = self.mem_mb / self.nodes
        if self.max_mem_per_node_mb is not None:
            per_node = (
                self.max_mem_per_node_mb if per_node is None else min(per_node, self.max_mem_per_node_mb)
            )
        return per_node

    @property
    def job_nodes(self) -> int:
        """Nodes one job may have: the partition's, at most MaxNodes."""
        return self.nodes if self.max_nodes is None else min(self.nodes, self.max_nodes)

    def nodes_for_cpus(self, cpus: int) -> int | None:
        """The fewest nodes that hold ``cpus`` CPUs in this partition (None: it cannot)."""
        if self.cpus_per_node < 1 or cpus < 1:
            return None
        nodes = math.ceil(cpus / self.cpus_per_node)
        return nodes if nodes <= self.job_nodes else None

    def nodes_for_tasks(self, cpus: int, per_task: int | None) -> int | None:
        """The fewest nodes that hold ``cpus`` CPUs in tasks of ``per_task`` CPUs, each task on one
        node and the last holding what is left (``per_task`` None: the CPUs spread freely, as
        nodes_for_cpus). None: it cannot."""
        if per_task is None:
            return self.nodes_for_cpus(cpus)
        a_node = self.cpus_per_node // per_task if per_task > 0 else 0
        if a_node < 1 or cpus < 1:
            return None
        tasks = -(-cpus // per_task)  # rounded up
        nodes = -(-tasks // a_node)
        return nodes if nodes <= self.job_nodes else None

    def nodes_for_gpus(self, gpus: int) -> int | None:
        """The fewest nodes that hold ``gpus`` GPUs in this partition (None: it cannot)."""
        if self.gpus_per_node < 1 or gpus < 1:
            return None
        nodes = math.ceil(gpus / self.gpus_per_node)
        return nodes if nodes <= self.job_nodes else None

    @property
    def most_cpus(self) -> int:
        return self.cpus_per_node * self.job_nodes

    @property
    def most_gpus(self) -> int:
        return self.gpus_per_node * self.job_nodes


def shapes_from_scontrol(text: str) -> dict[str, PartitionShape]:
    """Each partition's shape from ``scontrol show partition`` (with or without ``--oneliner``).
    ValueError names the partition and the field it cannot read."""
    out = {}
    for block in scontrol_records(text, "PartitionName"):
        name = block["PartitionName"]
        try:
            out[name] = shape_of(block)
        except ValueError as exc:
            raise ValueError(f"scontrol partition {name}: {exc}") from None
    return out


def shape_of(block: Mapping[str, str]) -> PartitionShape:
    """One partition's shape from its scontrol record (slurm_formats.scontrol_records); ValueError
    names the field it cannot read."""
    name = block["PartitionName"]
    raw = block.get("TRES", "")
    # A partition with no nodes (slurm.conf's "Nodes= ") has no TRES string: scontrol prints
    # printf's "(null)" for it. Nothing to price there, and no reason to lose the other partitions.
    tres = {} if raw.strip() == "(null)" else parse_tres(raw)  # its errors say TRES
    types = [k.removeprefix("gres/gpu:") for k in tres if k.startswith("gres/gpu:")]
    gpus = _field("TRES gres/gpu", gpus_in_tres, tres)
    return PartitionShape(
        name=name,
        nodes=_count(block.get("TotalNodes", "0"), "TotalNodes"),
        cpus=_cpus(block, tres),
        gpus=gpus or 0,  # GPUs whose count Slurm does not know (NO_VAL): none to price
        # GPUs of several types: which one a job gets, and is billed for, is not known before it runs
        gpu_type=types[0] if len(types) == 1 else None,
        mem_mb=_field("TRES mem", parse_memory_mb, tres["mem"]) if "mem" in tres else 0.0,
        max_nodes=_limit(block.get("MaxNodes"), "MaxNodes"),
        min_nodes=_limit(block.get("MinNodes"), "MinNodes") or 0,
        max_cpus_per_node=_limit(block.get("MaxCPUsPerNode"), "MaxCPUsPerNode"),
        max_mem_per_node_mb=_memory_limit(block.get("MaxMemPerNode"), "MaxMemPerNode"),
        max_mem_per_cpu_mb=_memory_limit(block.get("MaxMemPerCPU"), "MaxMemPerCPU") or None,
        max_minutes=_field("MaxTime", parse_max_time, block.get("MaxTime", "")),
        exclusive=_exclusive(block),
        access=PartitionAccess.of(block),
    )


def _exclusive(block: Mapping[str, str]) -> str:
    """The field that gives every job of the partition whole nodes, as slurmctld reads it; "" where
    jobs share them. ValueError for a value Slurm does not print: read as shared, a partition of
    whole nodes would be priced at a fraction of what it bills."""
    over = block.get("OverSubscribe")
    if over is not None:
        word = over.strip().upper().partition(":")[0]  # YES:4, FORCE:4
        if word == "EXCLUSIVE":
            return "OverSubscribe=EXCLUSIVE"
        if word not in _SHARED:
            raise ValueError(f"OverSubscribe: {over[:40]!r}: not EXCLUSIVE, NO, YES:<n> or FORCE:<n>")
    mode = block.get("Exclusive")  # Slurm 26.05 on
    if mode is not None:
        word = mode.strip().upper()
        if word in _WHOLE_NODES:
            return f"Exclusive={word}"
        if word not in _NOT_WHOLE:
            raise ValueError(f"Exclusive: {mode[:40]!r}: not NO, NODE, USER or TOPO")
    return ""


_SHARED = frozenset({"NO", "YES", "FORCE"})  # OverSubscribe values that leave nodes to share
_WHOLE_NODES = frozenset({"NODE", "TOPO"})  # Exclusive=TOPO implies NODE
_NOT_WHOLE = frozenset({"NO", "NONE", "USER"})  # USER: nodes go to one user's jobs, as they ask


def _cpus(block: Mapping[str, str], tres: Mapping[str, str]) -> int:
    """The CPUs slurmctld may give jobs: the TRES's cpu, which leaves out the cores CoreSpecCount or
    CPUSpecList keep for the system (TotalCPUs counts them: a node of 4 with one kept runs no -c 4,
    and a job holding it whole is given and billed 3). TotalCPUs where the TRES has no cpu; read
    either way, an odd one says the record is."""
    total = _count(block.get("TotalCPUs", "0"), "TotalCPUs")
    return _count(tres["cpu"], "TRES cpu") if "cpu" in tres else total


def _count(text: str, what: str) -> int:
    """A total (TotalNodes, TotalCPUs). One Slurm does not know (a sentinel, NO_VAL) does not read:
    read as 0, the advice would say the partition has no CPUs."""
    value = _field(what, parse_count, text)  # ASCII digits only: int() took "٤" as 4 CPUs
    if value is None:
        raise ValueError(f"{what}: {text[:40]!r}: a total Slurm does not know")
    return value


def _limit(text: str | None, what: str) -> int | None:
    """A per-job limit: None when there is none (UNLIMITED, INFINITE, NO_VAL) or it is not set."""
    return None if text is None or is_unlimited(text) else _field(what, parse_count, text)


def _memory_limit(text: str | None, what: str) -> float | None:
    return None if text is None or is_unlimited(text) else _field(what, parse_memory_mb, text)


def _field(what: str, read: Callable[[_In], _Out], value: _In) -> _Out:
    """``read(value)``, its ValueError naming the field ``what`` (the log says which one)."""
    try:
        return read(value)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
