"""Limits lowered while a job runs, by its user or an admin: the guard never raises a job past them.

The tag's ``t0`` is the user's limit at submission, and Slurm lets a user lower their job's limit
later (`scontrol update JobId=N TimeLimit=M`). Slurm itself sets a running job's limit only as it
starts the job (backfill within time_min, 22.05 backfill.c), and only operators raise it (the guard,
an admin); a requeued job waits at least slurmctld's credential window (about two minutes) before it
runs again, so it leaves the listing of running jobs in between. A limit below the highest one the
guard saw for the job in this run was therefore lowered by its user or an admin, and from then on it
is the job's own limit.

What the guard did not see it cannot tell: a limit lowered while the job was pending, before the
guard's first poll of the job, or while no guard ran (the guard keeps this in memory) is taken for
the limit the job started with.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_harp.guard.running import RunningJob

log = logging.getLogger(__name__)

# squeue prints whole seconds; within one run a job's run time never goes back (a suspended job's
# stands still), so a drop by more than this is a new run.
RUN_TIME_SLACK_S = 1.0
_UNLIMITED = sys.maxsize


@dataclass(slots=True)
class _Run:
    highest: int  # the highest limit seen in this run, minutes (_UNLIMITED: none)
    elapsed_s: float  # the run time seen last
    lowered_to: int | None = None  # the lowest limit seen below ``highest``


class LoweredLimits:
    """The limits of the running jobs the guard may extend, as this guard saw them poll after poll."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def apply(self, jobs: Iterable[RunningJob]) -> list[RunningJob]:
        """``jobs``, with ``lowered_to`` set on those whose limit was lowered while they ran. Jobs
        no longer listed are forgotten."""
        runs: dict[str, _Run] = {}
        out = []
        for job in jobs:
            if job.tag is None or job.tag.extendable_minutes is None:
                out.append(job)
                continue
            run = runs[job.job_id] = self._see(job)
            out.append(job if run.lowered_to is None else dataclasses.replace(job, lowered_to=run.lowered_to))
        self._runs = runs
        return out

    def _see(self, job: RunningJob) -> _Run:
        limit = _UNLIMITED if job.limit_minutes is None else job.limit_minutes
        run = self._runs.get(job.job_id)
        if run is None or job.elapsed_s < run.elapsed_s - RUN_TIME_SLACK_S:
            return _Run(limit, job.elapsed_s)  # first seen, or a new run after a requeue
        run.elapsed_s = job.elapsed_s
        if limit >= run.highest:
            run.highest = limit
        elif run.lowered_to is None or limit < run.lowered_to:
            log.info(
                "job %s: limit lowered from %d to %d min while it ran (by its user or an admin): "
                "the guard will not raise it past %d min",
                job.job_id, run.highest, limit, limit,
            )  # fmt: skip
            run.lowered_to = limit
        return run
