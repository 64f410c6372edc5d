"""EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001), and with SJBF order EASY-SJBF.

The queue is served in arrival order. The first waiting job that does not fit gets a reservation at
the "shadow" time, when enough processors will be free by the running jobs' planned limits; the
processors left over then are "extra". A later job may start now if it fits in the free processors
and either ends (by its planned limit) by the shadow time or needs no more than the extra ones. A
job with a time_min floor may instead start with its limit cut to end by the shadow time.
"""

from __future__ import annotations

import math

from slurm_harp.simulation.backlog import Backlog
from slurm_harp.simulation.engine import Simulation


class Easy:
    """EASY; backfill candidates in queue order, or shortest planned limit first when the limit
    source asks for it (``shortest_first``: EASY-SJBF, Tsafrir's EASY++).

    A scan over ``indexed_from`` or more waiting jobs goes through a ``Backlog`` (waiting jobs by
    width) and tries only the jobs that may start; a shorter one tries each job in turn. Both start
    the same jobs (tests/unit/test_simulation_easy_backlog.py)."""

    name = "easy"

    def __init__(self, *, indexed_from: int = 256) -> None:
        self._head = -1
        self._shadow = math.inf
        self._extra = 0
        self._indexed_from = indexed_from
        self._backlog: Backlog | None = None
        self._rank = 0

    def schedule(self, sim: Simulation) -> float | None:
        queue, procs = sim.queue, sim.procs
        self._index(sim)
        started = False
        while queue and procs[queue[0]] <= sim.free:
            self._start(sim, queue[0], sim.planned[queue[0]])
            started = True
        if not queue:
            self._head = -1
            return None
        head = queue[0]
        if started or sim.released or head != self._head:
            self._head = head
            self._shadow, self._extra = shadow(sim, head)
            sim.note_reservation(head, self._shadow)
            if self._backlog is not None:
                self._backfill_indexed(sim, self._backlog)
                return None
            candidates = self._order(sim, None)
        else:
            # Nothing ended and the head is the same: the jobs tried last time would fail again
            # (the shadow and extra processors are unchanged and time only moved on).
            candidates = self._order(sim, sim.arrived)
        self._backfill(sim, candidates)
        return None

    def head_reservation(self, sim: Simulation) -> float | None:
        return shadow(sim, sim.queue[0])[0] if sim.queue else None

    def _index(self, sim: Simulation) -> None:
        """Keep the backlog while the queue is long (from ``indexed_from`` jobs on, until it falls
        below a quarter of that), with the jobs that arrived since the last call."""
        backlog = self._backlog
        waiting = len(sim.queue)
        if backlog is None and waiting >= self._indexed_from:
            backlog = self._backlog = Backlog()
            arrived: list[int] = sim.queue
        elif backlog is not None and waiting < self._indexed_from // 4:
            self._backlog = None
            return
        else:
            arrived = sim.arrived
        if backlog is None:
            return
        procs, planned, floor = sim.procs, sim.planned, sim.floor
        by_plan = sim.limits.shortest_first
        for job in arrived:
            self._rank += 1
            key = (planned[job], job) if by_plan else (self._rank, job)
            backlog.add(job, procs[job], key, min(planned[job], floor[job]))

    def _start(self, sim: Simulation, job: int, limit: float) -> None:
        if self._backlog is not None:
            self._backlog.remove(job)
        sim.start(job, limit)

    @staticmethod
    def _order(sim: Simulation, arrived: list[int] | None) -> list[int]:
        head = sim.queue[0]
        if arrived is None:
            if sim.limits.shortest_first:
                return [job for _, job in sim.by_plan if job != head]
            return sim.queue[1:]
        if sim.limits.shortest_first:
            return sorted(arrived, key=sim.planned.__getitem__)
        return list(arrived)

    def _backfill(self, sim: Simulation, candidates: list[int]) -> None:
        if sim.free == 0:
            return
        procs = sim.procs
        for job in candidates:
            if procs[job] <= sim.free and self._try(sim, job) and sim.free == 0:
                break

    def _backfill_indexed(self, sim: Simulation, backlog: Backlog) -> None:
        # A margin over the reservation: _try decides with EASY's own sums, this only narrows.
        slack = self._shadow - sim.now + 1e-3
        failed = []
        while sim.free:
            job = backlog.first(sim.free, self._extra, slack)
            if job is None:
                break
            if not self._try(sim, job):
                failed.append((job, backlog.remove(job)))
        for job, entry in failed:
            backlog.add(job, *entry)

    def _try(self, sim: Simulation, job: int) -> bool:
        """Start ``job`` (that fits in the free processors) now if it does not delay the head."""
        now, shadow_time = sim.now, self._shadow
        limit = sim.planned[job]
        if now + limit <= shadow_time:
            self._start(sim, job, limit)
        elif sim.procs[job] <= self._extra:
            self._start(sim, job, limit)
            self._extra -= sim.procs[job]
        elif now + sim.floor[job] <= shadow_time:
            # time_min: the longest limit that still ends by the reservation.
            self._start(sim, job, shadow_time - now)
        else:
            return False
        return True


def shadow(sim: Simulation, head: int) -> tuple[float, int]:
    """The head job's reservation (shadow time) and the processors to spare then (extra)."""
    need = sim.procs[head]
    available = sim.free
    if available >= need:
        return sim.now, available - need
    procs = sim.procs
    ends = sim.ends
    for i, (end, job) in enumerate(ends):
        available += procs[job]
        if available >= need:
            # Jobs planned to end at the same instant free their processors then too.
            for later_end, later in ends[i + 1 :]:
                if later_end != end:
                    break
                available += procs[later]
            return end, available - need
    raise AssertionError(f"job {head} needs {need} processors, more than the machine has")
