"""What the site allows a running job's limit to grow to: reservations on its nodes, its
partition's MaxTime and its QOS's MaxWall.

The guard runs as an operator, and Slurm lets an operator raise a limit through all of these
(checked on Slurm 22.05: into a maintenance reservation, past a partition MaxTime). So the guard
checks them itself and refuses, logged and counted, what the site's own limits would forbid.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from slurm_harp.accounting.fields import parse_duration_s
from slurm_harp.guard.hostlist import expand
from slurm_harp.guard.running import RunningJob

log = logging.getLogger(__name__)

RESERVATIONS_ARGV = ("scontrol", "--oneliner", "show", "reservation")
PARTITIONS_ARGV = ("scontrol", "--oneliner", "show", "partition")
QOS_ARGV = ("sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=Name,MaxWall")


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    start: float  # unix seconds
    end: float
    nodes: frozenset[str]


@dataclass(frozen=True)
class Bounds:
    reservations: tuple[Reservation, ...] = ()
    partition_max_minutes: Mapping[str, int] = field(default_factory=dict)
    qos_max_minutes: Mapping[str, int] = field(default_factory=dict)

    def limit_for(self, job: RunningJob, now: float) -> tuple[int | None, str]:
        """(the largest limit in minutes the site allows ``job``, what sets it); None: no bound."""
        best: tuple[int | None, str] = (None, "")

        def lower(minutes: int, why: str) -> None:
            nonlocal best
            if best[0] is None or minutes < best[0]:
                best = (minutes, why)

        if job.partition in self.partition_max_minutes:
            lower(self.partition_max_minutes[job.partition], f"partition {job.partition} MaxTime")
        if job.qos in self.qos_max_minutes:
            lower(self.qos_max_minutes[job.qos], f"QOS {job.qos} MaxWall")
        started = now - job.elapsed_s
        try:
            nodes = expand(job.nodes)
        except ValueError:
            nodes = set()
        for r in self.reservations:
            if r.name == job.reservation:
                lower(math.floor((r.end - started) / 60.0), f"end of its reservation {r.name}")
            elif r.end > now and r.nodes & nodes:
                lower(math.floor((max(r.start, now) - started) / 60.0), f"reservation {r.name}")
        return best


def parse_reservations(text: str) -> tuple[Reservation, ...]:
    out = []
    for line in text.split("\n"):
        fields = _key_values(line)
        if "ReservationName" not in fields:
            continue
        try:
            out.append(
                Reservation(
                    name=fields["ReservationName"],
                    start=datetime.fromisoformat(fields["StartTime"]).timestamp(),
                    end=datetime.fromisoformat(fields["EndTime"]).timestamp(),
                    nodes=frozenset(expand(fields.get("Nodes", ""))),
                )
            )
        except Exception as exc:  # one odd line, whatever it raises, never stops a poll
            log.warning("reservation line skipped (%s: %s): %.200s", type(exc).__name__, exc, line)
    return tuple(out)


def parse_partition_max(text: str) -> dict[str, int]:
    out = {}
    for line in text.split("\n"):
        fields = _key_values(line)
        name, max_time = fields.get("PartitionName"), fields.get("MaxTime")
        if name and max_time:
            seconds = _duration(max_time)
            if seconds is not None:
                out[name] = math.floor(seconds / 60.0)
    return out


def parse_qos_max(text: str) -> dict[str, int]:
    out = {}
    for line in text.split("\n"):
        name, _, wall = line.partition("|")
        seconds = _duration(wall)
        if name.strip() and seconds is not None:
            out[name.strip()] = math.floor(seconds / 60.0)
    return out


def _duration(text: str) -> float | None:
    """Seconds, or None for no limit and (logged) for anything that does not read as a duration."""
    try:
        seconds = parse_duration_s(text)
    except Exception:  # ValueError, and OverflowError for a 400-digit field
        seconds = math.nan
    if seconds is not None and not math.isfinite(seconds):
        log.warning("unreadable duration %.40r", text)
        return None
    return seconds


def _key_values(line: str) -> dict[str, str]:
    """``scontrol --oneliner`` output: space-separated Key=Value pairs (values without spaces for
    the keys read here)."""
    out = {}
    for item in line.split():
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out
