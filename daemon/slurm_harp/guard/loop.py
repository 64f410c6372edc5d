"""One poll of `harp guard`: list the jobs, extend each shortened running one that falls due.

Idempotent (every decision is computed from the jobs' current state, their harp tags and the limits
seen before, kept in a file, so a restarted guard catches up on its first poll), rate-limited (at
most ``max_updates_per_poll`` scontrol calls, the jobs closest to their limit first, due earlier
when many are: guard.backlog), and one bad job never stops a poll. The guard follows each tagged
job's limit from poll to poll, pending or running, to see one its user lowered
(guard.lowered_limits), not one a restarted slurmctld brought back (guard.slurmctld_start), and
keeps what it saw in a file for the next guard (guard.seen_file), written at once when a job's own
limit changed, else at most once a minute and as the guard is closed (Guard.close; also when it is
collected or the interpreter exits).

Site bounds are read once a minute (guard.survey), but reservations again in every poll that is
about to extend a job: an operator's extension may run into a reservation created a second ago
(Slurm lets it), so the guard must see it; and in every poll while a job refused at a bound is
listed, so that one refused at a reservation deleted since is extended before its cut. When that
read fails, no job is extended in that poll (each counted as failed).

Intervals (the bounds' and the file's once a minute, the time an update takes) are measured on a
monotonic clock: on the wall clock, a step back of an hour stopped both reads and writes for the
hour. Wall time is for what Slurm compares with it: reservations, deadlines, the heartbeat.

A poll refreshes the heartbeat only when it is good: it listed the jobs, and not every extension it
tried failed. A guard whose every `scontrol update` fails (no operator rights, say) must not let the
daemon go on shortening jobs that nothing can extend. Nor is a poll whose heartbeat could not be
written counted good (guard.pulse), its extensions made all the same.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import weakref
from collections.abc import Callable

from slurm_harp.config import GuardSettings
from slurm_harp.core.extension import ConditionalRatios, next_limit
from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.backlog import UpdateTimer, due_jobs
from slurm_harp.guard.extension_history import ExtensionHistory
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.guard.lowered_limits import LoweredLimits
from slurm_harp.guard.pulse import PollReport, Pulse
from slurm_harp.guard.running import (
    RUNNING,
    SQUEUE_ARGV,
    RunningJob,
    limit_text,
    merge_duplicates,
    parse_running,
)
from slurm_harp.guard.seen_file import SeenFile
from slurm_harp.guard.slurm import TIMED_OUT, ConfigAfterListing, Runner
from slurm_harp.guard.slurmctld_start import SlurmctldStart
from slurm_harp.guard.survey import Survey
from slurm_harp.heartbeat import HeartbeatFile

__all__ = ["Guard", "PollReport"]

log = logging.getLogger(__name__)


class Guard:
    def __init__(
        self,
        settings: GuardSettings,
        runner: Runner,
        metrics: GuardMetrics,
        clock: Callable[[], float] = time.time,
        history: ExtensionHistory | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: wall time; ``monotonic``: for intervals (see the module's note)."""
        self._run = runner
        self.metrics = metrics
        self._pulse = Pulse(metrics)
        self._clock, self._monotonic = clock, monotonic
        self._updates = UpdateTimer()  # as the last guard measured it, once loaded (guard.seen_file)
        self._seen_file = SeenFile(settings.state, monotonic, self._updates)
        self.configure(settings, history)
        config = ConfigAfterListing(runner)  # read once a poll after the listing, shared
        self._survey = Survey(runner, config)  # the site's bounds
        # Jobs refused at a site bound, and the limit they were refused at: logged and counted once,
        # tried again when their limit changes or their bound leaves room (_recheck_refused).
        self._refused: dict[str, int] = {}
        self._slurmctld = SlurmctldStart(runner, config)  # its start: a raise undone, or a lowering?
        self._updated = False  # an `scontrol update` run since the last listing: a raise to place
        self._lowered = LoweredLimits(self._slurmctld, self._seen_file.load())
        # `harp guard` calls close() as it stops; a Guard dropped without it still writes at exit.
        self._close = weakref.finalize(self, self._seen_file.write, self._lowered)

    def configure(self, settings: GuardSettings, history: ExtensionHistory | None = None) -> None:
        """``history``: the site's ended jobs for the conditional extension (None: steps only)."""
        self.settings = settings
        self.metrics.poll_period.set(settings.poll_seconds)  # HarpGuardStale's threshold follows it
        if settings.state != self._seen_file.path:  # a SIGHUP: the new path gets all at the next save
            self._seen_file.path = settings.state
            self._lowered.changed = True
        self.heartbeat = HeartbeatFile(settings.heartbeat, settings.stale_seconds, self._clock)
        self.history = history if settings.extension == "conditional" else None

    def close(self) -> None:
        """Write what the guard saw and has not written yet (a clean stop); once."""
        self._close()

    def poll(self) -> PollReport | None:
        """One poll; None when the running jobs could not be listed. The heartbeat is refreshed only
        after a poll that did not fail every extension (PollReport.extended), so that otherwise the
        daemon stops shortening new jobs; the poll is good once it is written (guard.pulse)."""
        started = self._monotonic()
        self._slurmctld.start_poll(started, self._lowered.seen.values(), self._updated)
        listing = self._run(SQUEUE_ARGV)
        if listing.returncode != 0:
            log.error("squeue failed (exit %d): %.300s", listing.returncode, listing.stderr.strip())
            self._pulse.failed()
            return None
        self._updated = False  # the updates run before this listing are in it
        now = self._clock()
        self._survey.start_poll(self._monotonic())
        unread: set[str] = set()
        failed: list[int] = []
        parsed = list(parse_running(listing.stdout, unread, failed))
        if failed and not parsed:
            # No line of a job to follow read (squeue's output changed with a Slurm upgrade, say):
            # the guard sees no job it should extend, and must not tell the daemon it is there to.
            # (Lines of untagged jobs that do not run are not read at all, and count for neither.)
            log.error(
                "no line of squeue's output reads: heartbeat not refreshed (new jobs keep their limits)"
            )
            self._pulse.failed()
            return None
        merged, ambiguous = merge_duplicates(parsed)
        jobs = [j for j in self._lowered.apply(merged, unread, ambiguous) if j.state == RUNNING]
        shortened = [j for j in jobs if j.shortened]
        listed = {j.job_id for j in jobs}
        self._refused = {job: limit for job, limit in self._refused.items() if job in listed}
        self._recheck_refused(shortened, now)
        due = due_jobs(
            [j for j in shortened if self._refused.get(j.job_id) != j.limit_minutes],
            self.settings.lead_seconds,
            self._updates.seconds,
            self.settings.max_updates_per_poll,
            self.settings.poll_seconds,
        )
        ratios = self._ratios()
        outcomes = []
        batch = due[: self.settings.max_updates_per_poll]
        if batch and not self._survey.reservations_fresh():
            log.error("reservations unreadable: none of %d due jobs extended this poll", len(batch))
            outcomes = [(job.job_id, results.FAILED) for job, _ in batch]
            self.metrics.extensions.labels(results.FAILED).inc(len(batch))
            batch = []
        for job, lead in batch:
            try:
                outcomes.append((job.job_id, self._extend(job, now, lead, ratios)))
            except Exception:  # one bad job never stops the poll
                log.exception("job %s: extension failed", job.job_id)
                outcomes.append((job.job_id, results.FAILED))
                self.metrics.extensions.labels(results.FAILED).inc()
        if len(due) > self.settings.max_updates_per_poll:
            log.warning("%d jobs due, %d extended this poll", len(due), self.settings.max_updates_per_poll)
        self._updates.end_poll()
        self.metrics.update_seconds.set(self._updates.seconds)
        self.metrics.shortened.set(len(shortened))
        self._seen_file.keep(self._lowered)
        self.metrics.poll_duration.observe(self._monotonic() - started)
        report = PollReport(len(jobs), len(shortened), len(due), tuple(outcomes))
        if not report.extended:
            log.error("every extension failed: heartbeat not refreshed (new jobs keep their limits)")
            self._pulse.failed()
            return report
        return report if self._pulse.beat(self.heartbeat, now) else dataclasses.replace(report, beat=False)

    def _recheck_refused(self, shortened: list[RunningJob], now: float) -> None:
        """Forget the refusal of each job whose bound leaves room now (a reservation deleted, a
        MaxTime raised, a core-based reservation started), the reservations read fresh: it falls due
        again at once. A refused job has less than the lead left, often less than a minute: looked at
        again only at the bounds' once-a-minute read, it was stopped at its cut first."""
        refused = [j for j in shortened if self._refused.get(j.job_id) == j.limit_minutes]
        if not refused or not self._survey.reservations_fresh():
            return
        for job in refused:
            bound, _ = self._survey.bounds.limit_for(job, now)
            if bound is None or bound > max(job.limit_minutes or 0, job.listed_above or 0):
                del self._refused[job.job_id]

    def _ratios(self) -> ConditionalRatios | None:
        """The site's ended jobs for the conditional extension; None (steps) when there are none or
        they fail in any way: the ratios only refine an extension, they must never stop one."""
        try:
            ratios = None if self.history is None else self.history.ratios()
            self.metrics.history_jobs.set(0 if ratios is None else len(ratios))
        except Exception:
            log.exception("extension history unusable: extending by steps this poll")
            ratios = None
            self.metrics.history_jobs.set(0)
        return ratios

    def _extend(self, job: RunningJob, now: float, lead: float, ratios: ConditionalRatios | None) -> str:
        """``lead``: the time to leave the job (the configured lead, more under a backlog)."""
        own, limit = job.own_limit_minutes, job.limit_minutes
        assert own is not None and limit is not None  # RunningJob.shortened
        prediction = job.prediction_minutes or limit
        bound, why = self._survey.bounds.limit_for(job, now)
        base, elapsed = limit, job.elapsed_s
        if job.listed_above is not None:  # listed twice: due by the lower line, set past the higher
            base, elapsed = job.listed_above, max(elapsed, job.listed_above * 60.0 - lead)
        try:
            ext = next_limit(prediction, base, own, elapsed, lead, bound, ratios=ratios)
        except Exception:
            if ratios is None:
                raise
            log.exception("job %s: conditional extension failed: extended by a step", job.job_id)
            ext = next_limit(prediction, base, own, elapsed, lead, bound)
        if ext is None:
            if job.listed_above is not None and job.listed_above >= own:
                # No limit both past the higher line and within the user's own exists.
                log.warning(
                    "job %s: listed at %d and %d min, not extended past its own %d min; "
                    "it may be stopped at %d min", job.job_id, limit, job.listed_above, own, limit,
                )  # fmt: skip
            return "none"
        margin = limit * 60.0 - job.elapsed_s
        if ext.new_limit <= base:
            log.warning(
                "job %s: not extended past %d min (%s); it may be stopped before its own %d min",
                job.job_id, limit, why, own,
            )  # fmt: skip
            self.metrics.extensions.labels(results.REFUSED_BOUND).inc()
            self._refused[job.job_id] = limit
            return results.REFUSED_BOUND
        asked, self._updated = self._monotonic(), True
        done = self._run(
            ("scontrol", "update", f"JobId={job.job_id}", f"TimeLimit={limit_text(ext.new_limit)}")
        )
        if done.returncode != TIMED_OUT:  # the timeout's 20 s say nothing of an update's time
            self._updates.add(self._monotonic() - asked)
        if done.returncode != 0:
            message = done.stderr.strip() or done.stdout.strip()
            result = (
                results.GONE
                if "already finished" in message or "Invalid job id" in message
                else results.FAILED
            )
            log.log(
                logging.INFO if result == results.GONE else logging.ERROR,
                "job %s: scontrol refused TimeLimit=%d: %.200s", job.job_id, ext.new_limit, message,
            )  # fmt: skip
            self.metrics.extensions.labels(result).inc()
            return result
        if ext.capped_by_bound:
            result = results.CAPPED
        elif ext.reaches(own):
            result = results.REACHED_REQUEST
        else:
            result = results.EXTENDED
        capped = f"; capped by {why}" if ext.capped_by_bound else ""
        how = "the site's ended jobs" if ext.conditional else "a step"
        log.info(
            "job %s: time limit %d -> %d min by %s (own %d, %.0f s were left)%s",
            job.job_id, limit, ext.new_limit, how, own, margin, capped,
        )  # fmt: skip
        self.metrics.extensions.labels(result).inc()
        self.metrics.margin.observe(max(margin, 0.0))
        return result
