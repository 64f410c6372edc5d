"""What the site allows a running job's limit to grow to: reservations on its nodes, its
partition's MaxTime and, where slurmctld enforces limits (guard.enforcement), the MaxWall of its QOS
or its partition's (guard.qos), else of its association (guard.associations); and the job's own
deadline (``--deadline``: Slurm started it with a limit that ends by then, and never kills it for it
later, so an extension past it would run the job past the time its user gave).

The guard runs as an operator, and Slurm lets an operator raise a limit through all of these
(checked on Slurm 22.05: into a maintenance reservation, past a partition MaxTime). So the guard
checks them itself and refuses, logged and counted, what the site's own limits would forbid.

Reservations: a job is never extended past the end of a reservation it may run in (it may name
several, ``--reservation=R1,R2``), nor into another reservation on its nodes. A core-based
reservation (CoreCnt below its nodes' cores) bounds the jobs beside it only until it starts: before,
the cores Slurm chose for it may be a job's; once it runs, Slurm has kept its cores apart from every
job it did not ignore, so extending them takes nothing from it. One flagged MAINT or IGNORE_JOBS
(placed over running jobs) bounds them as a whole-node one does.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.accounting.fields import SLURM_ZONE, parse_moment
from slurm_harp.guard.associations import AssociationTable
from slurm_harp.guard.hostlist import expand
from slurm_harp.guard.qos import QOS_ARGV, QosTable, bound_minutes, parse_partition_qos, parse_qos
from slurm_harp.guard.running import RunningJob
from slurm_harp.slurm_formats import scontrol_records

__all__ = ["QOS_ARGV", "Bounds", "Reservation", "parse_qos"]

log = logging.getLogger(__name__)

RESERVATIONS_ARGV = ("scontrol", "--oneliner", "show", "reservation")
PARTITIONS_ARGV = ("scontrol", "--oneliner", "show", "partition")
# Node names (a host list), sockets per node and cores per socket, one line per kind of node.
NODE_CORES_ARGV = ("sinfo", "--noheader", "--format=%N|%X|%Y")
# Reservations placed over running jobs: they bound the jobs on their nodes whatever their size.
_OVER_JOBS = frozenset({"MAINT", "IGNORE_JOBS"})


@dataclass(frozen=True, slots=True)
class Reservation:
    name: str
    start: float  # unix seconds
    end: float
    nodes: frozenset[str]
    cores: int = 0  # CoreCnt: the cores it holds on its nodes (0: not known)
    flags: frozenset[str] = frozenset()
    # Its node list did not read (guard.hostlist): taken to hold every node, so that it bounds every
    # job; a maintenance reservation must not be extended into for a list the guard cannot read.
    unread_nodes: bool = False

    def bounds_others(self, now: float, node_cores: Mapping[str, int]) -> bool:
        """Whether it bounds the jobs on its nodes that do not run in it (see the module's note)."""
        if self.start > now or self.flags & _OVER_JOBS:
            return True
        return not self.holds_some_cores(node_cores)

    def holds_some_cores(self, node_cores: Mapping[str, int]) -> bool:
        """Core-based: fewer cores than its nodes have (False where a node's cores are unknown)."""
        if not self.cores or not self.nodes or any(n not in node_cores for n in self.nodes):
            return False
        return self.cores < sum(node_cores[n] for n in self.nodes)


@dataclass(frozen=True)
class Bounds:
    reservations: tuple[Reservation, ...] = ()
    partition_max_minutes: Mapping[str, int] = field(default_factory=dict)
    qos: QosTable = field(default_factory=QosTable)
    partition_qos: Mapping[str, str] = field(default_factory=dict)  # partition -> its QOS
    node_cores: Mapping[str, int] = field(default_factory=dict)
    associations: AssociationTable = field(default_factory=AssociationTable)
    # AccountingStorageEnforce sets limits: without, Slurm stops no job at a QOS's or an
    # association's MaxWall, and neither bounds an extension (a partition's MaxTime always does).
    limits_enforced: bool = False

    def limit_for(self, job: RunningJob, now: float) -> tuple[int | None, str]:
        """(the largest limit in minutes the site allows ``job``, what sets it); None: no bound."""
        best: tuple[int | None, str] = (None, "")

        def lower(minutes: int, why: str) -> None:
            nonlocal best
            if best[0] is None or minutes < best[0]:
                best = (minutes, why)

        if job.partition in self.partition_max_minutes:
            lower(self.partition_max_minutes[job.partition], f"partition {job.partition} MaxTime")
        if self.limits_enforced:
            wall = self.qos.max_wall(job.qos, self.partition_qos.get(job.partition))
            if wall is None:  # a QOS's MaxWall, larger or smaller, passes over the association's
                wall = self.associations.max_wall(job.cluster, job.account, job.user, job.partition)
            if wall is not None:
                lower(*wall)
        started = now - job.elapsed_s  # when it would have started had it never been suspended
        if job.deadline is not None:
            deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(job.deadline))
            lower(math.floor((job.deadline - started) / 60.0), f"its deadline {deadline}")
        nodes: set[str] | None
        try:
            nodes = expand(job.nodes)
        except ValueError as exc:  # on every node, as far as a reservation can tell: bounded by all
            log.warning("job %s: node list unreadable (%s): every reservation bounds it", job.job_id, exc)
            nodes = None

        def overlaps(r: Reservation) -> bool:
            return r.unread_nodes or nodes is None or bool(r.nodes & nodes)

        own = set(job.reservation.split(",")) if job.reservation else set()
        for r in self.reservations:
            if r.name in own:
                # Slurm keeps "R1,R2" for a job that may run in either: one that holds nodes but
                # none of the job's is not the one it runs in.
                if not (r.nodes and nodes and not overlaps(r)):
                    # an end unknown (a record that does not read): no room
                    room = math.floor((r.end - started) / 60.0) if math.isfinite(r.end) else 0
                    lower(room, f"end of its reservation {r.name}")
            elif r.end > now and overlaps(r) and r.bounds_others(now, self.node_cores):
                lower(math.floor((max(r.start, now) - started) / 60.0), f"reservation {r.name}")
        return best


def parse_reservations(text: str) -> tuple[Reservation, ...]:
    out = []
    for fields in scontrol_records(text, "ReservationName"):
        try:
            nodes, unread = _nodes(fields)
            out.append(
                Reservation(
                    name=fields["ReservationName"],
                    # scontrol runs in SLURM_ZONE (guard.slurm)
                    start=parse_moment(fields["StartTime"], SLURM_ZONE),
                    end=parse_moment(fields["EndTime"], SLURM_ZONE),
                    nodes=nodes,
                    cores=int(fields.get("CoreCnt", "0")),
                    flags=frozenset(fields.get("Flags", "").upper().split(",")) - {"", "(NULL)"},
                    unread_nodes=unread,
                )
            )
        except Exception as exc:  # one odd record, whatever it raises, never stops a poll
            # Taken for a maintenance reservation on every node from now on, as a node list that
            # does not read is: skipped, its window unknown, a job would be extended into it.
            log.warning(
                "reservation %.40r does not read (%s: %s): no job is extended while it is there",
                fields["ReservationName"], type(exc).__name__, exc,
            )  # fmt: skip
            out.append(_unread(str(fields["ReservationName"])))
    return tuple(out)


def _unread(name: str) -> Reservation:
    return Reservation(name, -math.inf, math.inf, frozenset(), flags=_OVER_JOBS, unread_nodes=True)


def _nodes(fields: Mapping[str, str]) -> tuple[frozenset[str], bool]:
    """A reservation's nodes, and whether they did not read (logged: it then bounds every job)."""
    try:
        return frozenset(expand(fields.get("Nodes", ""))), False
    except ValueError as exc:
        log.warning(
            "reservation %.40r: node list unreadable (%s): taken to hold every node",
            fields["ReservationName"], exc,
        )  # fmt: skip
        return frozenset(), True


def parse_partition_max(text: str) -> dict[str, int]:
    """Each partition's MaxTime in minutes; one without a limit, or whose limit does not read
    (logged), is not bounded by it."""
    out = {}
    for fields in scontrol_records(text, "PartitionName"):
        name = fields["PartitionName"]
        minutes = bound_minutes(fields.get("MaxTime", ""), f"partition {name!r:.40} MaxTime")
        if name and minutes is not None:
            out[name] = minutes
    return out


def parse_partitions(text: str) -> tuple[dict[str, int], dict[str, str]]:
    """Each partition's MaxTime (parse_partition_max) and QOS (guard.qos), from one listing."""
    return parse_partition_max(text), parse_partition_qos(text)


def parse_node_cores(text: str) -> dict[str, int]:
    """NODE_CORES_ARGV's output: node -> cores. A line that does not read is logged and skipped
    (its nodes' reservations then count as whole-node ones)."""
    out = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            hosts, sockets, cores = line.strip().split("|")
            per_node = int(sockets) * int(cores)
            out.update(dict.fromkeys(expand(hosts), per_node))
        except Exception as exc:
            log.warning("node line skipped (%s: %s): %.200s", type(exc).__name__, exc, line)
    return out
