"""Slurm-like backfilling, as sched/backfill plans (Slurm 22.05).

Two parts, as in slurmctld. The main scheduler, on every event, starts waiting jobs in priority order
until the first that does not fit. The backfill pass, at most every ``bf_interval`` seconds and only
when something changed since the last one, walks the first ``bf_max_job_test`` waiting jobs in
priority order over a profile of free processors built from the running jobs' limits, all times
rounded up to ``bf_resolution``: a job that fits now starts, any other gets a reservation at its
earliest start (if within ``bf_window``), and later jobs may only use what the reservations leave.
A job with a time_min floor is tested with its floor, and starts with it as its limit or is reserved
for it: backfill.c (22.05 to 24.05) sets ``time_limit = comp_time_limit = time_min`` for the test,
reserves ``start + time_limit``, and on a start "sets the limit as high as possible" to
comp_time_limit, the time_min (``_reset_job_time_limit`` then only lowers it, not below time_min);
the test cluster's accounting shows such jobs with their time_min as their limit. The main
scheduler starts a job with its full limit: job_scheduler.c uses time_min only to check a
deadline. Priority is arrival order (Slurm's priority/basic, or FCFS age).
Not modelled: partitions, QOS, fair-share, nodes and topology (processors are one pool), the pass's
own run time and bf_continue, bf_max_job_user and the like.
"""

from __future__ import annotations

import math

from slurm_harp.simulation.engine import Simulation
from slurm_harp.simulation.profile import FreeProfile

# Slurm 22.05's defaults (slurm.conf SchedulerParameters).
BF_MAX_JOB_TEST = 500
BF_RESOLUTION = 60
BF_WINDOW = 1440 * 60
BF_INTERVAL = 30


class SlurmBackfill:
    name = "slurm"

    def __init__(
        self,
        *,
        bf_max_job_test: int = BF_MAX_JOB_TEST,
        bf_resolution: float = BF_RESOLUTION,
        bf_window: float = BF_WINDOW,
        bf_interval: float = BF_INTERVAL,
    ) -> None:
        if bf_max_job_test < 1 or bf_resolution <= 0 or bf_window <= 0 or bf_interval < 0:
            raise ValueError("bf_max_job_test >= 1, bf_resolution > 0, bf_window > 0, bf_interval >= 0")
        self.max_job_test = bf_max_job_test
        self.resolution = bf_resolution
        self.window = bf_window
        self.interval = bf_interval
        self._changed = False
        self._last_pass = -math.inf

    def schedule(self, sim: Simulation) -> float | None:
        queue, procs = sim.queue, sim.procs
        while queue and procs[queue[0]] <= sim.free:
            sim.start(queue[0], sim.planned[queue[0]])
            self._changed = True
        if sim.released or sim.arrived:
            self._changed = True
        if not queue or not self._changed:
            return None
        due = self._last_pass + self.interval
        if sim.now < due:
            return due
        self._pass(sim)
        self._changed = False
        self._last_pass = sim.now
        return None

    def head_reservation(self, sim: Simulation) -> float | None:
        if not sim.queue:
            return None
        head = sim.queue[0]
        return self._profile(sim).earliest(sim.procs[head], self._tested(sim, head))

    def _round(self, duration: float) -> float:
        return math.ceil(duration / self.resolution) * self.resolution

    def _tested(self, sim: Simulation, job: int) -> float:
        """How long the pass tests and reserves a waiting job for: its limit, or its time_min floor
        when it has one, rounded up to the resolution."""
        return self._round(min(sim.floor[job], sim.planned[job]))

    def _profile(self, sim: Simulation) -> FreeProfile:
        res = self.resolution
        procs = sim.procs
        releases = [(math.ceil(end / res) * res, procs[job]) for end, job in sim.ends]
        return FreeProfile(sim.now, sim.free, releases)

    def _pass(self, sim: Simulation) -> None:
        procs, planned, floor = sim.procs, sim.planned, sim.floor
        now = sim.now
        horizon = now + self.window
        res = self.resolution
        profile = self._profile(sim)
        tested = sim.queue[: self.max_job_test]
        # The narrowest and the shortest (time_min: by its floor) job from each rank on: once none
        # of them could start now, the rest of the pass could only add reservations nobody uses.
        narrowest = [0] * len(tested)
        shortest = [0.0] * len(tested)
        low_p, low_d = math.inf, math.inf
        for k in range(len(tested) - 1, -1, -1):
            job = tested[k]
            low_p = min(low_p, procs[job])
            low_d = min(low_d, math.ceil(min(floor[job], planned[job]) / res) * res)
            narrowest[k] = int(low_p)
            shortest[k] = low_d
        # A job as wide and as long as one placed earlier in this pass cannot start before it did
        # (the profile only fills up): its search starts there.
        placed: dict[tuple[int, float], float] = {}
        for rank, job in enumerate(tested):
            hopeless = profile.free[0] < narrowest[rank] or profile.zero_at - now < shortest[rank]
            if hopeless and not (rank == 0 and sim.record_reservations):
                break
            p = procs[job]
            # time_min: tested with it, and started with it as the limit (even where more would
            # fit) or reserved for it, as slurmctld does.
            limit = min(planned[job], floor[job])
            duration = math.ceil(limit / res) * res
            start = profile.earliest(p, duration, horizon, placed.get((p, duration)))
            if start is not None:
                placed[(p, duration)] = start
            if start == now:
                sim.start(job, limit)
                profile.reserve(now, now + duration, p)
                continue
            if start is None:
                continue
            profile.reserve(start, start + duration, p)
            if rank == 0:
                sim.note_reservation(job, start)
