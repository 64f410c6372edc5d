"""The site's bounds as the guard reads them (guard.bounds): the partitions, the QOS, the
associations, the nodes' cores and whether slurmctld enforces limits (guard.enforcement) once a
minute (one call each), the reservations then and again in a poll that needs them fresh
(guard.loop).

A read that fails keeps the last known (logged). So does a read of the partitions, the QOS, the
associations or the nodes that succeeds but lists none (scontrol, sacctmgr or sinfo printing
nothing, exit 0), logged once until they are listed again: Slurm runs no job outside a partition,
nor on no node, and every cluster has a root association, so such a read is no listing of the site.
Taken as it was, it made every partition's MaxTime and every QOS's MaxWall none, and the guard
extended jobs past them (Slurm lets an operator).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TypeVar

from slurm_harp.guard.associations import ASSOCIATIONS_ARGV, lists_associations, parse_associations
from slurm_harp.guard.bounds import (
    NODE_CORES_ARGV,
    PARTITIONS_ARGV,
    QOS_ARGV,
    RESERVATIONS_ARGV,
    Bounds,
    parse_node_cores,
    parse_partitions,
    parse_qos,
    parse_reservations,
)
from slurm_harp.guard.enforcement import Enforcement
from slurm_harp.guard.slurm import ConfigAfterListing, Runner
from slurm_harp.slurm_formats import scontrol_records

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")
# Partitions, QOS, associations, nodes and slurmctld's enforcement change rarely: read them this often.
BOUNDS_REFRESH_S = 60.0


def _lists_partitions(text: str) -> bool:
    return bool(scontrol_records(text, "PartitionName"))


def _lists_qos(text: str) -> bool:
    return any(line.partition("|")[0].strip() for line in text.split("\n"))


def _lists_nodes(text: str) -> bool:
    return bool(text.strip())


class Survey:
    def __init__(self, run: Runner, config: ConfigAfterListing) -> None:
        """``config``: slurmctld's configuration as read after the poll's listing, shared."""
        self._run = run
        self._enforcement = Enforcement(config)
        self.bounds = Bounds()
        self._at = -float("inf")
        self._fresh = False  # the reservations read in this poll
        self._empty: set[str] = set()  # what was last read empty (said once)

    def start_poll(self, now: float) -> None:
        """Every bound, when the last read is a minute old; ``now`` on a monotonic clock (a wall
        clock stepped back an hour read nothing for the hour)."""
        self._fresh = False
        if now - self._at < BOUNDS_REFRESH_S:
            if not self._enforcement.known:  # a first read that failed (a timeout): tried each poll
                self.bounds = dataclasses.replace(self.bounds, limits_enforced=self._enforcement.read())
            return
        old = self.bounds
        partitions = (old.partition_max_minutes, old.partition_qos)
        max_time, partition_qos = self._read(
            "partitions", PARTITIONS_ARGV, parse_partitions, partitions, _lists_partitions
        )
        self.bounds = Bounds(
            reservations=old.reservations,
            partition_max_minutes=max_time,
            qos=self._read("QOS", QOS_ARGV, parse_qos, old.qos, _lists_qos),
            partition_qos=partition_qos,
            node_cores=self._read(
                "node cores", NODE_CORES_ARGV, parse_node_cores, old.node_cores, _lists_nodes
            ),
            associations=self._read(
                "associations", ASSOCIATIONS_ARGV, parse_associations, old.associations, lists_associations
            ),
            limits_enforced=self._enforcement.read(),
        )
        self._at = now
        self.reservations_fresh()

    def reservations_fresh(self) -> bool:
        """Whether the reservations are read in this poll: already, or now; False when they cannot be
        (logged, the last known kept)."""
        if not self._fresh:
            fresh = self._read("reservations", RESERVATIONS_ARGV, parse_reservations, None)
            if fresh is not None:
                self.bounds = dataclasses.replace(self.bounds, reservations=fresh)
            self._fresh = fresh is not None
        return self._fresh

    def _read(
        self,
        what: str,
        argv: tuple[str, ...],
        parse: Callable[[str], T],
        last: U,
        lists: Callable[[str], bool] | None = None,
    ) -> T | U:
        """``parse`` of ``argv``'s output, or ``last`` (logged) when the command fails or, with
        ``lists``, its output lists nothing."""
        done = self._run(argv)
        if done.returncode != 0:
            log.warning("could not read %s: %.200s", what, done.stderr.strip())
            return last
        if lists is not None and not lists(done.stdout):
            if what not in self._empty:
                log.warning("%s: %s listed none (exit 0): the last read kept", what, argv[0])
                self._empty.add(what)
            return last
        if what in self._empty:
            log.info("%s listed again", what)
            self._empty.discard(what)
        return parse(done.stdout)
