"""Limits lowered by a job's user (or an admin), before or while it runs: the guard never raises a
job past them.

The tag's ``t0`` is the user's limit at submission, and Slurm lets a user lower their job's limit
later (`scontrol update JobId=N TimeLimit=M`); a pending job's, also raise it again up to its
partition's MaxTime (22.05 update_job). What Slurm itself does to a limit (22.05):
- it never changes a pending job's: backfill tries a limit cut toward time_min only while it holds
  the job lock, and puts it back before it yields;
- it sets a running job's limit as it starts it (backfill within time_min, a deadline, the
  partition's DefaultTime), and only then; only operators raise a running job's limit;
- a requeue counts a restart (squeue's RestartCnt: every requeue path of job_mgr.c adds one) and
  leaves the job pending with the limit it ran with (cut by backfill, raised by the guard); the
  epilog's end gives it a new submit time too (batch_requeue_fini).

So the guard follows each tagged job through its pending spell and its run, one (restart count,
submit time) at a time: a new one starts afresh, but for a new submit time of a job seen waiting
since its requeue (its epilog ended: the same spell, _prior). A run time that goes back within one
is the clock stepping back, not a new run (logged): what was seen holds.
- pending: a limit below the highest seen in this spell is the user's own from then on, and so is
  one below the limit harp gave the job at submission while it never ran (the tag's cut in extend
  mode, its ``t0`` in time_min mode). A raise while pending may be the user's own, so the own limit
  follows it (none once it is back at that highest); one above the tag's own limit is written at
  once (guard.seen_file), as it becomes the own limit when the job starts;
- starting: the pending spell's own limit goes on into the run, unless the job starts above the
  limit last seen pending (raised meanwhile). A start below it is Slurm's doing, not a lowering. A
  limit last seen pending above the tag's own (a user may raise a pending job's limit up to its
  partition's MaxTime) is the job's own from then on, instead of the tag's (``raised_to``);
- running: a limit below the highest seen in this run was lowered, and the lowest such is the own
  limit for the rest of the run, an admin's later raise included. Only an operator or a guard
  raises a running job's limit, and a second guard's extension may land after this guard's higher
  one (each computes its own, from the limit it listed): a drop to a limit still above the one seen
  just before the latest raise (``raised_from``), before the job has run LATE_LANDING_S past that
  one, is taken for such, the job's limit from then on, extended when due. Any other drop from
  above that limit, listed by a slurmctld other than one seen holding the raise (``raise_held_by``,
  guard.slurmctld_start), is slurmctld's state from before the raise (a restart, a backup taking
  over; with two guards, it may hold the lower one's raise): the raise is undone, and the job
  extended again when due. A drop
  from a limit already at or below it (lowered after the raise) is a lowering, whoever lists it;
- configuring (nodes booting), or in a state flag not placed (guard.running): what was seen is
  kept as it was until the job runs;
- completing: a job that ran with the restart count seen is ending, and what was seen is kept until
  it leaves the listing; one with a new count was requeued, and is pending (Slurm requeues a job
  as pending at once, then waits for its epilog).

What the guard did not see it cannot tell: a limit lowered before it first saw the job (other than
below the submitted one of a job that never ran), or lowered within a poll of the start, is taken
for one Slurm started the job with. What it saw it keeps in a file (guard.seen_file), so a restarted
guard goes on from there. A job (id, submit time) no longer listed is forgotten once it has been
missing from MISSING_POLLS listings in a row; a job whose squeue line did not read is kept for as long
as it does not. Dropped at once, a lowering was forgotten when one line of the job failed to read,
and the next poll extended the job past it; kept, a job missing for a while is seen as after polls that
failed, which its restart count and submit time tell apart from a new run.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_harp.core.tag import Tag
from slurm_harp.guard.running import (
    COMPLETING,
    PENDING,
    UNLIMITED,
    UNSETTLED,
    YEAR_MINUTES,
    RunningJob,
    limit_or_unlimited,
)

if TYPE_CHECKING:
    from slurm_harp.guard.slurmctld_start import SlurmctldStart

log = logging.getLogger(__name__)

# squeue prints whole seconds; within one run a job's run time never goes back (a suspended job's
# stands still), so a drop by more than this is the clock stepping back (logged).
RUN_TIME_SLACK_S = 1.0
# Listings in a row a job may be missing from before what was seen of it is forgotten: a minute at
# the default poll period, long past a line garbled once.
MISSING_POLLS = 12
# Another guard's extension, computed from a limit the job had not yet run past (else Slurm ended it),
# lands within the rest of that guard's poll (a batch of scontrol calls): this long past the limit.
LATE_LANDING_S = 300.0


@dataclass(slots=True)
class Seen:
    """One job as the guard saw it, in its current pending spell or run (minutes)."""

    submitted: str  # the job's submit time: the same id later is another job
    restarts: int
    pending: bool
    highest: int  # the highest limit seen in this spell or run (UNLIMITED: none)
    limit: int  # the limit seen last
    elapsed_s: float  # the run time seen last (0 while pending)
    lowered_to: int | None = None  # its user's (or an admin's) own limit, below ``highest``
    raised_to: int | None = None  # in a run: the limit it waited at, above its tag's own limit
    raised_from: int | None = None  # in a run: the limit seen just before its latest raise
    raise_held_by: int | None = None  # the BOOT_TIME of a slurmctld seen holding that raise


class LoweredLimits:
    """The limits of the jobs the guard may extend, as it saw them poll after poll."""

    def __init__(self, slurmctld: SlurmctldStart, seen: dict[str, Seen] | None = None) -> None:
        """``slurmctld``: its start tells a restart's limit from a lowering."""
        self.seen: dict[str, Seen] = seen or {}
        self._slurmctld = slurmctld
        self._missing: dict[str, int] = {}  # listings in a row each kept job was missing from
        # Since the last save (guard.seen_file): anything but run times; a job's own limit (written at once).
        self.changed = self.own_limit_changed = False
        self._went_back = 0  # jobs whose run time went back in this listing

    def apply(
        self, jobs: Iterable[RunningJob], unread: Collection[str] = (), ambiguous: Collection[str] = ()
    ) -> list[RunningJob]:
        """``jobs``, with ``lowered_to`` set on those whose user or an admin lowered the limit.
        Jobs listed but ``unread`` (their lines did not parse) or ``ambiguous`` (listed twice,
        running.merge_duplicates) are kept as seen; jobs no longer listed are forgotten after
        MISSING_POLLS listings."""
        seen: dict[str, Seen] = {}
        out = []
        for job in jobs:
            if job.tag is None or job.tag.extendable_minutes is None:
                out.append(job)
                continue
            key = _key(job.job_id)
            prior = self._prior(job, key)
            if job.job_id in ambiguous:  # which line is the job's? no lowering is read from either
                if key in self.seen:
                    seen[key] = self.seen[key]
                out.append(job if prior is None else _with_own(job, prior))
                continue
            before, own_before = (None, (None, None)) if prior is None else (_kept(prior), _own(prior))
            highest_before = None if prior is None else prior.highest
            if job.state == COMPLETING:
                now = self._completing(job, prior)
            else:
                now = prior if job.state == UNSETTLED else self._see(job, prior)
            if now is not None:
                seen[key] = now
                self.changed |= before is None or _kept(now) != before
                # A highest that fell is a new spell (a job seen running, then pending under the same
                # restart count): written at once too, or a restarted guard might take its next start
                # for a lowering below the old highest.
                fell = highest_before is not None and now.highest < highest_before
                # A pending job raised above its tag's own limit: the limit it waits at becomes its own
                # as it starts (_raised). Left waiting, a crash lost it, and a restarted guard that
                # first saw the job run, cut by backfill, stopped it at the tag's own limit.
                rose = now.pending and now.highest > job.tag.extendable_minutes
                rose &= highest_before is None or now.highest > highest_before
                self.own_limit_changed |= _own(now) != own_before or fell or rose
                job = _with_own(job, now)
            out.append(job)
        if self._went_back:
            log.warning(
                "%d jobs' run times went back by more than %g s, their restart counts and submit times "
                "unchanged: the clock stepped back; the same runs, and what was seen of them holds",
                self._went_back, RUN_TIME_SLACK_S,
            )  # fmt: skip
            self._went_back = 0
        self._keep_missing(seen, {_key(job_id) for job_id in unread})
        self.changed |= seen.keys() != self.seen.keys()
        self.seen = seen
        return out

    def _keep_missing(self, seen: dict[str, Seen], unread: set[str]) -> None:
        """Into ``seen``, the jobs seen before and not in this listing: those whose line did not
        read, and the others until they have been missing from MISSING_POLLS listings in a row."""
        missing = {}
        for key, prior in self.seen.items():
            if key in seen:
                continue
            polls = 0 if key in unread else self._missing.get(key, 0) + 1
            if polls < MISSING_POLLS:
                seen[key], missing[key] = prior, polls
        self._missing = missing

    def _prior(self, job: RunningJob, key: str) -> Seen | None:
        """What was seen of this job in this spell or run; or of the array record it came from (a
        task that starts or is updated alone leaves the array's pending record with its limit)."""
        prior = self.seen.get(key)
        if prior is None and "_" in key:
            prior = self.seen.get(key.split("_")[0] + "_[")
            prior = None if prior is None else dataclasses.replace(prior)  # each task its own copy
        if prior is None or prior.restarts != job.restarts:
            return None  # first seen, or requeued since
        if prior.submitted == job.submitted:
            return prior
        # A requeued job's epilog ended (Slurm 22.05 sets a submit time only there, batch_requeue_fini,
        # and as it makes a job): the spell seen waiting since the requeue goes on. A job that ran waits
        # again only through a requeue, which counts a restart; only another job given this id (ids
        # wrapped), requeued as often and listed while this one is kept, would be taken for it.
        if not prior.pending or job.restarts == 0:
            return None  # another job of that id
        log.info("job %s: a new submit time as its requeue's epilog ended: the same spell", job.job_id)
        self.changed = True
        return dataclasses.replace(prior, submitted=job.submitted)

    def _completing(self, job: RunningJob, prior: Seen | None) -> Seen | None:
        """A job ending, kept as seen until it leaves the listing; or one requeued (a restart count it
        was not seen running with), pending until its epilog ends."""
        if prior is not None and not prior.pending:
            return prior
        if prior is None and job.restarts == 0:
            return None  # never requeued: ending, and not followed before
        return self._see(dataclasses.replace(job, state=PENDING), prior)

    def _see(self, job: RunningJob, prior: Seen | None) -> Seen:
        limit = limit_or_unlimited(job)
        pending = job.state == PENDING
        if prior is None or (pending and not prior.pending):  # first seen, or pending again
            fresh = Seen(job.submitted, job.restarts, pending, limit, limit, job.elapsed_s)
            if not pending:
                return fresh
            if job.restarts == 0:
                fresh.highest = max(limit, _submitted_limit(job.tag))
            return self._pending(job, fresh, limit)
        if pending:
            prior.highest = max(prior.highest, limit)
            return self._pending(job, prior, limit)
        if prior.pending:  # it started: Slurm may have cut its limit (backfill, a deadline)
            lowered = prior.lowered_to if limit <= prior.limit else None
            raised = _raised(job, prior.limit)
            return Seen(job.submitted, job.restarts, False, limit, limit, job.elapsed_s, lowered, raised)
        if job.elapsed_s < prior.elapsed_s - RUN_TIME_SLACK_S:
            self._went_back += 1  # the clock: every requeue changes the restart count (logged in apply)
        was = prior.limit
        if limit > was:
            prior.raised_from, prior.raise_held_by = was, None
        prior.elapsed_s, prior.limit = job.elapsed_s, limit
        if not _below(limit, prior.highest):
            prior.highest = max(prior.highest, limit)
        elif _late(prior.raised_from, limit, job.elapsed_s):
            # The own limit stays (t0 its cap): the job is extended only when due, never back at once.
            # The landed limit is the job's from now on: kept as the highest, a drop to it read as a
            # lowering once the window closed, before the job fell due under it.
            prior.highest = limit
            if limit < was:
                log.info(
                    "job %s: limit %d -> %d min, above the %s min before its latest raise: taken for "
                    "another guard's extension landing late, not a lowering",
                    job.job_id, was, limit, prior.raised_from,
                )  # fmt: skip
        elif self._slurmctld.undone(job.job_id, prior, was):
            # Not the user's: the own limit stays, the job is extended again when due. The restored
            # limit is its highest: held as it is, it is no lowering at the next poll.
            prior.highest = limit
            prior.raised_from = prior.raise_held_by = None
        elif prior.lowered_to is None or limit < prior.lowered_to:
            _lowered(job, prior.highest, limit, "while it ran")
            prior.lowered_to = limit
        self._slurmctld.hold(prior)
        return prior

    @staticmethod
    def _pending(job: RunningJob, seen: Seen, limit: int) -> Seen:
        lowered = limit if _below(limit, seen.highest) else None
        if lowered is not None and lowered != seen.lowered_to:
            _lowered(job, seen.highest, limit, "while it was pending")
        elif seen.lowered_to is not None and lowered is None:
            log.info("job %s: limit raised back to %d min while pending", job.job_id, limit)
        seen.limit, seen.lowered_to = limit, lowered
        return seen


def _below(limit: int, highest: int) -> bool:
    """Whether ``limit`` is a lowering from ``highest``: not one squeue printed INVALID (over a year,
    guard.running), whose true value may be anything over a year, even above ``highest``."""
    return limit < highest and limit <= YEAR_MINUTES


def _kept(s: Seen) -> tuple[object, ...]:
    """What the file keeps of ``s`` (guard.seen_file): all but the run time, which grows every poll."""
    kept = (s.submitted, s.restarts, s.pending, s.highest, s.limit, s.lowered_to, s.raised_to)
    return (*kept, s.raised_from, s.raise_held_by)


def _own(s: Seen) -> tuple[int | None, int | None]:
    return s.lowered_to, s.raised_to


def _with_own(job: RunningJob, s: Seen) -> RunningJob:
    """``job`` with the own limit ``s`` holds for it."""
    if s.lowered_to is None and s.raised_to is None:
        return job
    return dataclasses.replace(job, lowered_to=s.lowered_to, raised_to=s.raised_to)


def _raised(job: RunningJob, waited: int) -> int | None:
    """The limit a job waited at as it started, when above its tag's own limit (logged): raised while
    it was pending, by its user (up to its partition's MaxTime) or an admin."""
    own = None if job.tag is None else job.tag.extendable_minutes
    if own is None or waited <= own:
        return None
    was = "unlimited" if waited == UNLIMITED else f"{waited} min"
    log.info(
        "job %s: started after waiting at %s, above its tag's own %d min (raised while pending): "
        "the guard may extend it up to %s",
        job.job_id, was, own, was,
    )  # fmt: skip
    return waited


def _submitted_limit(tag: Tag | None) -> int:
    """The limit harp gave a job at submission: its cut in extend mode, the user's in time_min."""
    if tag is None or tag.extendable_minutes is None:
        return 0
    return tag.values.get("t", 0) if tag.flags.get("t") == "!" else tag.extendable_minutes


def _key(job_id: str) -> str:
    """A pending array record's id names tasks that change as they leave it: key it by its array."""
    return job_id[: job_id.index("_[") + 2] if "_[" in job_id else job_id


def _lowered(job: RunningJob, highest: int, limit: int, when: str) -> None:
    was = "unlimited" if highest == UNLIMITED else str(highest)
    log.info(
        "job %s: limit lowered from %s to %d min %s (by its user or an admin): "
        "the guard will not raise it past %d min",
        job.job_id, was, limit, when, limit,
    )  # fmt: skip


def _late(raised_from: int | None, limit: int, elapsed_s: float) -> bool:
    """Whether a drop to ``limit`` may be another guard's extension landing late (see the module's note)."""
    return raised_from is not None and limit > raised_from and elapsed_s < raised_from * 60 + LATE_LANDING_S
