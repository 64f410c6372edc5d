"""EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001), and with SJBF order EASY-SJBF.

The queue is served in arrival order. The first waiting job that does not fit gets a reservation at
the "shadow" time, when enough processors will be free by the running jobs' planned limits; the
processors left over then are "extra". A later job may start now if it fits in the free processors
and either ends (by its planned limit) by the shadow time or needs no more than the extra ones. A
job with a time_min floor may instead start with its limit cut to end by the shadow time.
"""

from __future__ import annotations

import math

from slurm_harp.simulation.engine import Simulation


class Easy:
    """EASY; backfill candidates in queue order, or shortest planned limit first when the limit
    source asks for it (``shortest_first``: EASY-SJBF, Tsafrir's EASY++)."""

    name = "easy"

    def __init__(self) -> None:
        self._head = -1
        self._shadow = math.inf
        self._extra = 0

    def schedule(self, sim: Simulation) -> float | None:
        queue, procs = sim.queue, sim.procs
        started = False
        while queue and procs[queue[0]] <= sim.free:
            sim.start(queue[0], sim.planned[queue[0]])
            started = True
        if not queue:
            self._head = -1
            return None
        head = queue[0]
        if started or sim.released or head != self._head:
            self._head = head
            self._shadow, self._extra = shadow(sim, head)
            sim.note_reservation(head, self._shadow)
            candidates = self._order(sim, None)
        else:
            # Nothing ended and the head is the same: the jobs tried last time would fail again
            # (the shadow and extra processors are unchanged and time only moved on).
            candidates = self._order(sim, sim.arrived)
        self._backfill(sim, candidates)
        return None

    def head_reservation(self, sim: Simulation) -> float | None:
        return shadow(sim, sim.queue[0])[0] if sim.queue else None

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
        procs, planned, floor = sim.procs, sim.planned, sim.floor
        now, shadow_time, extra = sim.now, self._shadow, self._extra
        for job in candidates:
            p = procs[job]
            if p > sim.free:
                continue
            limit = planned[job]
            if now + limit <= shadow_time:
                sim.start(job, limit)
            elif p <= extra:
                sim.start(job, limit)
                extra -= p
            elif now + floor[job] <= shadow_time:
                # time_min: the longest limit that still ends by the reservation.
                sim.start(job, shadow_time - now)
            else:
                continue
            if sim.free == 0:
                break
        self._extra = extra


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
