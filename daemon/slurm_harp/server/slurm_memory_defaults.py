"""The memory defaults slurmctld gives a job that asks none (core.memory_default), read with
scontrol every REFRESH_S (RETRY_S after a failed reading, at once after a SIGHUP), in a thread of
harp serve's loop.

slurm.conf's DefMemPerCPU or DefMemPerNode come from ``scontrol show config``; a partition's own
from ``scontrol show partition`` (one without its own shows ``DefMemPerNode=UNLIMITED``, as one whose
jobs get a whole node's memory would: slurm.conf's then applies); a node's memory, less what
MemSpecLimit keeps for the system, from ``scontrol show node``. When scontrol fails or prints a
value not read here, the last good reading is kept (none yet: such jobs are served without it, as
before), logged once until a reading succeeds again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from slurm_harp.core.memory_default import WHOLE_NODE, MemoryDefault, MemoryDefaults, PartitionMemory
from slurm_harp.server.advisor import CONFIG_ARGV, NODES_ARGV, PARTITIONS_ARGV, Runner, run_scontrol
from slurm_harp.slurm_formats import (
    config_value,
    is_unlimited,
    node_memory_mb,
    parse_int,
    scontrol_records,
)

__all__ = ["REFRESH_S", "RETRY_S", "SlurmMemoryDefaults", "parse_memory_defaults"]

log = logging.getLogger(__name__)

REFRESH_S = 600.0  # partitions change by hand (scontrol update), slurm.conf's at a reconfigure
RETRY_S = 60.0  # after a failed reading (slurmctld not up yet as the daemon starts, say)


def parse_memory_defaults(config_text: str, partitions_text: str, nodes_text: str) -> MemoryDefaults:
    """The defaults ``scontrol show config`` and ``scontrol show partition`` print, with each
    partition's node memory from ``scontrol show node``; ValueError naming the field whose value is
    not a size in MB, UNLIMITED or absent."""
    cluster = _default("scontrol show config", config_value(config_text, "DefMemPerCPU"),
                       config_value(config_text, "DefMemPerNode")) or WHOLE_NODE  # fmt: skip
    node_mb = node_memory_mb(nodes_text)
    partitions: dict[str, PartitionMemory] = {}
    default_partition = None
    for record in scontrol_records(partitions_text, "PartitionName"):
        name = record["PartitionName"]
        own = _default(f"partition {name}", record.get("DefMemPerCPU"), record.get("DefMemPerNode"))
        partitions[name] = PartitionMemory(own or cluster, node_mb.get(name))
        if record.get("Default") == "YES":
            default_partition = name
    return MemoryDefaults(cluster, partitions, default_partition)


def _default(where: str, per_cpu: str | None, per_node: str | None) -> MemoryDefault | None:
    cpu, node = _mb(where, "DefMemPerCPU", per_cpu), _mb(where, "DefMemPerNode", per_node)
    if cpu is not None:
        return MemoryDefault(per_cpu_mb=cpu)
    if node is not None:
        return MemoryDefault(per_node_mb=node)
    return None


def _mb(where: str, key: str, text: str | None) -> int | None:
    """MB, or None: not shown, UNLIMITED or 0 (no default: a whole node's memory)."""
    if text is None or is_unlimited(text):
        return None
    try:
        value = parse_int(text)
    except ValueError:
        value = None
    if value is None:
        raise ValueError(f"{where}: {key}={text[:40]!r} is no size in MB")
    return value or None


class SlurmMemoryDefaults:
    """Hands ``apply`` the defaults scontrol shows, at most every ``refresh_seconds``."""

    def __init__(
        self,
        apply: Callable[[MemoryDefaults], None],
        runner: Runner = run_scontrol,
        refresh_seconds: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._apply, self._runner, self._refresh, self._clock = apply, runner, refresh_seconds, clock
        self._read_at: float | None = None
        self._last: MemoryDefaults | None = None
        self._failing = False
        self._reading: threading.Thread | None = None

    def due(self) -> bool:
        """``refresh_seconds`` after the last reading, RETRY_S after a failed one, or asked for."""
        wait = min(self._refresh, RETRY_S) if self._failing else self._refresh
        return self._read_at is None or self._clock() - self._read_at >= wait

    def read_soon(self) -> None:
        """Make the next poll read them (SIGHUP: a site that changed a default says so)."""
        self._read_at = None

    def poll(self) -> None:
        """Read them in this thread when due."""
        if self.due():
            self.read()

    def poll_in_background(self) -> None:
        """Read them in a thread of their own when due, one reading at a time: with slurmctld down
        scontrol takes up to COMMAND_TIMEOUT_S per call, which would hold harp serve's loop (its
        signals and socket checks) that long."""
        if (self._reading is None or not self._reading.is_alive()) and self.due():
            self._read_at = self._clock()  # here: a read_soon while it reads is a reading more
            self._reading = threading.Thread(target=self._read, name="memory-defaults", daemon=True)
            self._reading.start()

    def read(self) -> None:
        """Read them now; a failure keeps the last good reading, logged once in a spell."""
        self._read_at = self._clock()
        self._read()

    def _read(self) -> None:
        try:
            config, partitions, nodes = (self._runner(a) for a in (CONFIG_ARGV, PARTITIONS_ARGV, NODES_ARGV))
            read = parse_memory_defaults(config, partitions, nodes)
        except (RuntimeError, ValueError) as exc:
            if not self._failing:
                kept = "keeping the last reading" if self._last is not None else "none known yet"
                log.warning(
                    "memory defaults: cannot read them (%s): %s; jobs that ask no memory or all of a "
                    "node's are served without the memory slurmctld gives them", kept, exc,
                )  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.info("memory defaults: read again")
        self._failing = False
        if read != self._last:
            log.info("memory defaults: %s", _describe(read))
            unknown = sorted(name for name, p in read.partitions.items() if p.node_mb is None)
            if unknown:
                log.warning(
                    "memory defaults: scontrol show node shows no node of %s: jobs there asking all of "
                    "a node's memory are served without it (a partition without nodes, or PrivateData="
                    "nodes hiding them from a user who is no Slurm operator: docs/install.md)",
                    ", ".join(unknown[:20]) + (f" and {len(unknown) - 20} more" if len(unknown) > 20 else ""),
                )
            self._last = read
            self._apply(read)


def _describe(defaults: MemoryDefaults) -> str:
    def one(d: MemoryDefault) -> str:
        if d.per_cpu_mb is not None:
            return f"{d.per_cpu_mb} MB per CPU"
        return f"{d.per_node_mb} MB per node" if d.per_node_mb else "none (a whole node)"

    parts = sorted(defaults.partitions.items())
    own = ", ".join(f"{name} {one(p.default)}" for name, p in parts if p.default != defaults.cluster)
    nodes = ", ".join(f"{name} {p.node_mb} MB" for name, p in parts if p.node_mb is not None)
    return (
        f"slurm.conf {one(defaults.cluster)}"
        + (f"; partitions of their own: {own}" if own else "")
        + (f"; a node's memory: {nodes}" if nodes else "")
    )
