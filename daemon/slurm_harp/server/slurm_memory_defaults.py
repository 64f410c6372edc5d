"""The memory defaults slurmctld gives a job that asks none (core.memory_default), read with
scontrol by the daemon's loop every REFRESH_S (RETRY_S after a failed reading).

slurm.conf's DefMemPerCPU or DefMemPerNode come from ``scontrol show config``; a partition's own
from ``scontrol show partition`` (one without its own shows ``DefMemPerNode=UNLIMITED``, as one whose
jobs get a whole node's memory would: slurm.conf's then applies). When scontrol fails or prints a
value not read here, the last good reading is kept (none yet: jobs asking no memory are served
without it, as before), logged once until a reading succeeds again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from slurm_harp.core.memory_default import MemoryDefault, MemoryDefaults
from slurm_harp.server.advisor import CONFIG_ARGV, PARTITIONS_ARGV, Runner, run_scontrol
from slurm_harp.slurm_formats import config_value, is_unlimited, parse_int, scontrol_records

__all__ = ["REFRESH_S", "RETRY_S", "SlurmMemoryDefaults", "parse_memory_defaults"]

log = logging.getLogger(__name__)

REFRESH_S = 600.0  # partitions change by hand (scontrol update), slurm.conf's at a reconfigure
RETRY_S = 60.0  # after a failed reading (slurmctld not up yet as the daemon starts, say)


def parse_memory_defaults(config_text: str, partitions_text: str) -> MemoryDefaults:
    """The defaults ``scontrol show config`` and ``scontrol show partition`` print; ValueError
    naming the field whose value is not a size in MB, UNLIMITED or absent."""
    cluster = _default("scontrol show config", config_value(config_text, "DefMemPerCPU"),
                       config_value(config_text, "DefMemPerNode"))  # fmt: skip
    partitions: dict[str, MemoryDefault] = {}
    for record in scontrol_records(partitions_text, "PartitionName"):
        name = record["PartitionName"]
        own = _default(f"partition {name}", record.get("DefMemPerCPU"), record.get("DefMemPerNode"))
        if own is not None:
            partitions[name] = own
    return MemoryDefaults(cluster, partitions)


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
    """Hands ``apply`` the defaults scontrol shows, at most every ``refresh_seconds`` (``poll``)."""

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

    def poll(self) -> None:
        """Read them when due: ``refresh_seconds`` after the last reading, RETRY_S after a failed
        one. scontrol runs in the caller's thread (harp serve's loop, not the submissions')."""
        now = self._clock()
        wait = min(self._refresh, RETRY_S) if self._failing else self._refresh
        if self._read_at is not None and now - self._read_at < wait:
            return
        self._read_at = now
        try:
            read = parse_memory_defaults(self._runner(CONFIG_ARGV), self._runner(PARTITIONS_ARGV))
        except (RuntimeError, ValueError) as exc:
            if not self._failing:
                kept = "keeping the last reading" if self._last is not None else "none known yet"
                log.warning(
                    "memory defaults: cannot read them (%s): %s; jobs that ask no memory are served "
                    "without the default slurmctld gives them", kept, exc,
                )  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.info("memory defaults: read again")
        self._failing = False
        if read != self._last:
            log.info("memory defaults: %s", _describe(read))
            self._last = read
            self._apply(read)


def _describe(defaults: MemoryDefaults) -> str:
    def one(d: MemoryDefault | None) -> str:
        if d is None:
            return "none"
        return f"{d.per_cpu_mb} MB per CPU" if d.per_cpu_mb is not None else f"{d.per_node_mb} MB per node"

    own = ", ".join(f"{name} {one(d)}" for name, d in sorted(defaults.partitions.items()))
    return f"slurm.conf {one(defaults.cluster)}" + (f"; partitions of their own: {own}" if own else "")
