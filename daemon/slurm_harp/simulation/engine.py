"""The discrete-event loop: jobs arrive, a scheduler starts them, they end or are killed.

A job runs for min(its real run time, its kill limit). The scheduler plans with each running job's
planned limit; when a job still runs its limit source's ``lead`` before reaching it (an expiry:
`harp guard` extends that far ahead, Tsafrir's correction comes at the limit), the limit source gives
a longer one. A job killed before its user's own request (rewrite mode) is submitted again at the
kill time with that request: one re-run, the cheapest re-execution in core-hours (HARP's doubling of
the limit, evaluation/costs.py and advice/reexecution.py, runs attempts of 2x, 4x... the cut limit
before reaching the request, so it costs at least as many; its waits can be longer or shorter).
Events at one instant are all applied (ends, then expiries, then arrivals) before the scheduler
runs once.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from slurm_harp.simulation.limits import LimitSource
from slurm_harp.simulation.workload import Workload

_END, _EXPIRY, _WAKE = 0, 1, 2
_PROGRESS_EVERY = 2000


class Scheduler(Protocol):
    name: str

    def schedule(self, sim: Simulation) -> float | None:
        """Start what may start now (through ``sim.start``); return when to be called again even
        if nothing happens (a periodic pass), or None."""
        ...

    def head_reservation(self, sim: Simulation) -> float | None:
        """When the first waiting job could start given the running jobs' planned limits."""
        ...


@dataclass
class Attempts:
    """Every run of every job, in the order they ended: job index, start, end, killed before its
    user's own request (the kills that re-run), killed at a limit at all."""

    job: list[int] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    killed_early: list[bool] = field(default_factory=list)
    killed: list[bool] = field(default_factory=list)


@dataclass
class Result:
    """What happened: per job its final attempt's start and end, every attempt, and the limit
    changes (expiries) with how much each pushed back the first waiting job's reservation."""

    workload: Workload
    scheduler: str
    limits: str
    start: list[float]
    end: list[float]
    attempts: Attempts
    extensions: int = 0
    extension_delays: list[float] = field(default_factory=list)
    head_reservation: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0


class Simulation:
    """The state a scheduler sees and changes. ``queue`` is the waiting jobs in priority order
    (arrival order); ``by_plan`` the same jobs as (planned limit, job) pairs, sorted, kept only for
    shortest-first backfill; ``ends`` the running jobs as (planned end, job), sorted."""

    def __init__(self, workload: Workload, limits: LimitSource, *, record_reservations: bool = False) -> None:
        n = len(workload)
        self.workload = workload
        self.limits = limits
        self.procs = workload.procs
        self.processors = workload.processors
        self.free = workload.processors
        self.now = -math.inf
        self.queue: list[int] = []
        self.by_plan: list[tuple[float, int]] = []
        self.ends: list[tuple[float, int]] = []
        self.planned = [0.0] * n
        self.kill = [0.0] * n
        self.floor = [0.0] * n
        self.started_at = [math.nan] * n
        # Each waiting job's place in arrival order: the queue is sorted by it (removal by bisect).
        self._queued = [0] * n
        self._queued_count = 0
        # Set by the engine between scheduler calls: new waiting jobs, and whether a running job
        # ended or changed its planned end (anything else leaves a scheduler's last plan valid).
        self.arrived: list[int] = []
        self.released = False
        self.record_reservations = record_reservations
        self.head_reservation: dict[int, float] = {}
        self._events: list[tuple[float, int, int, int]] = []
        self._seq = 0

    # ---- what schedulers call --------------------------------------------------------------------

    def start(self, job: int, limit: float) -> None:
        """Start waiting ``job`` now, planned with ``limit`` (its kill limit stays as it is)."""
        now = self.now
        del self.queue[bisect_left(self.queue, self._queued[job], key=self._queued.__getitem__)]
        if self.limits.shortest_first:
            del self.by_plan[bisect_left(self.by_plan, (self.planned[job], job))]
        self.free -= self.procs[job]
        self.planned[job] = limit
        self.started_at[job] = now
        self._push(now + min(self.workload.run[job], self.kill[job]), _END, job)
        self._push_expiry(job)
        insort(self.ends, (now + limit, job))

    def note_reservation(self, job: int, when: float) -> None:
        """Remember the first reservation a job got while it was first in line (for checks)."""
        if self.record_reservations and job not in self.head_reservation:
            self.head_reservation[job] = when

    # ---- the loop --------------------------------------------------------------------------------

    def _push(self, when: float, kind: int, job: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, kind, self._seq, job))

    def _enqueue(self, job: int, planned: float, kill: float, floor: float) -> None:
        self.planned[job] = planned
        self.kill[job] = kill
        self.floor[job] = floor
        self._queued_count += 1
        self._queued[job] = self._queued_count
        self.queue.append(job)
        if self.limits.shortest_first:
            insort(self.by_plan, (planned, job))
        self.arrived.append(job)

    def run(
        self, scheduler: Scheduler, progress: Callable[[int, int], None] | None = None
    ) -> tuple[list[float], list[float], Attempts, int, list[float]]:
        w = self.workload
        n = len(w)
        submit, run, request, procs = w.submit, w.run, w.request, w.procs
        limits = self.limits
        final_start = [math.nan] * n
        final_end = [math.nan] * n
        attempts = Attempts()
        extensions = 0
        delays: list[float] = []
        events = self._events
        wake_at = math.inf
        nxt = 0
        done = 0
        while nxt < n or events:
            now = min(submit[nxt] if nxt < n else math.inf, events[0][0] if events else math.inf)
            self.now = now
            while events and events[0][0] == now:
                _, kind, _, job = heapq.heappop(events)
                if kind == _END:
                    ran = now - self.started_at[job]
                    self.free += procs[job]
                    del self.ends[bisect_left(self.ends, (self.started_at[job] + self.planned[job], job))]
                    limits.ended(job, now, ran)
                    killed = run[job] > self.kill[job]
                    early = killed and self.kill[job] < request[job]
                    attempts.job.append(job)
                    attempts.start.append(self.started_at[job])
                    attempts.end.append(now)
                    attempts.killed_early.append(early)
                    attempts.killed.append(killed)
                    self.released = True
                    if early:
                        # The user submits it again with their own request (one re-run).
                        self._enqueue(job, request[job], request[job], request[job])
                    else:
                        final_start[job] = self.started_at[job]
                        final_end[job] = now
                        done += 1
                        if progress is not None and done % _PROGRESS_EVERY == 0:
                            progress(done, n)
                elif kind == _EXPIRY:
                    extensions += 1
                    before = scheduler.head_reservation(self) if self.queue else None
                    self._extend(job)
                    if before is not None:
                        after = scheduler.head_reservation(self)
                        if after is not None and after > before:
                            delays.append(after - before)
                else:
                    wake_at = math.inf
            while nxt < n and submit[nxt] == now:
                plan = limits.submitted(nxt, now)
                self._enqueue(nxt, plan.planned, plan.kill, plan.floor)
                nxt += 1
            wake = scheduler.schedule(self)
            self.arrived = []
            self.released = False
            if wake is not None and wake < wake_at:
                wake_at = wake
                self._push(wake, _WAKE, -1)
        if progress is not None:
            progress(done, n)
        return final_start, final_end, attempts, extensions, delays

    def _push_expiry(self, job: int) -> None:
        """The running job's next expiry, if it is planned below its kill limit and still runs
        ``lead`` before its planned limit (at once if that is already past)."""
        start, planned, kill = self.started_at[job], self.planned[job], self.kill[job]
        at = max(self.now, start + planned - self.limits.lead)
        if planned < kill and at < start + min(self.workload.run[job], kill):
            self._push(at, _EXPIRY, job)

    def _extend(self, job: int) -> None:
        start = self.started_at[job]
        old = self.planned[job]
        new = max(min(self.limits.expired(job, self.now, old), self.kill[job]), old)
        del self.ends[bisect_left(self.ends, (start + old, job))]
        insort(self.ends, (start + new, job))
        self.planned[job] = new
        if new > old:  # a source that does not raise leaves the plan as it is until the job ends
            self._push_expiry(job)
        self.released = True


def simulate(
    workload: Workload,
    scheduler: Scheduler,
    limits: LimitSource,
    *,
    progress: Callable[[int, int], None] | None = None,
    record_reservations: bool = False,
) -> Result:
    """Replay ``workload`` under ``scheduler`` with limits from ``limits``."""
    import time

    t0 = time.perf_counter()
    sim = Simulation(workload, limits, record_reservations=record_reservations)
    start, end, attempts, extensions, delays = sim.run(scheduler, progress)
    return Result(
        workload=workload,
        scheduler=scheduler.name,
        limits=limits.name,
        start=start,
        end=end,
        attempts=attempts,
        extensions=extensions,
        extension_delays=delays,
        head_reservation=sim.head_reservation,
        seconds=time.perf_counter() - t0,
    )
