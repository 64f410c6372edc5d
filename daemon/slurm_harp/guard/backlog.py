"""When a shortened job falls due for an extension, with many due at once.

The guard extends one job per `scontrol update`, in turn, at most ``max_updates_per_poll`` a poll. A
job is due once less than the lead is left of its limit; that is enough for a few jobs, not for a
large array cut by one prediction: its tasks fall due together, and at 0.2 s a call the thousandth
update comes minutes after the limit of the tasks it was for. So the lead grows with the queue: the
job that ``rank`` jobs closer to their limits stand before is due once less is left than the lead
plus the time the guard takes to reach it (``rank`` updates, and a poll period for every full batch
before its own). When it is due, so is every job closer to its limit, and each is extended to leave
it, past the time the guard takes to reach it, enough for one more round of the backlog: extended by
a minute's step only, a whole array would fall due again before the guard got round it. The time an
update takes is measured (UpdateTimer), never assumed small, and kept in the guard's state file
(guard.seen_file) for the next guard: one that started among many due jobs and had timed no update
went by the first guess, and at 0.2 s let tasks of a slower slurmctld pass their limits. A poll
period of backlog is within the lead (at least two periods), so a few jobs due together are extended
as one alone is.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurm_harp.guard.running import RunningJob

# The time an update is taken to need until one is measured: a slow slurmctld's, so that a guard
# that starts among many due jobs starts early rather than late (an early extension is capped at the
# user's own limit all the same).
FIRST_GUESS_S = 1.0
# The most a time the last guard measured is trusted at start, until this guard measures its own:
# one measured while slurmctld hung would have every shortened job extended at once.
RESTORED_CAP_S = 5.0
# Weight of the newest poll's mean in the estimate: a slurmctld that slows is followed in a few polls.
NEWEST_WEIGHT = 0.5


class UpdateTimer:
    """How long one `scontrol update` takes: a moving mean over the polls that made any."""

    def __init__(self) -> None:
        self.seconds = FIRST_GUESS_S
        self.measured = False
        self.restored = False
        self._spent = 0.0
        self._calls = 0

    def add(self, seconds: float) -> None:
        self._spent += max(seconds, 0.0)
        self._calls += 1

    def end_poll(self) -> None:
        if self._calls:
            newest = self._spent / self._calls
            weight = NEWEST_WEIGHT if self.measured else 1.0  # the guess is no measure
            self.seconds = weight * newest + (1 - weight) * self.seconds
            self.measured = True
        self._spent, self._calls = 0.0, 0

    def restore(self, seconds: float) -> None:
        """Start from what the last guard measured (guard.seen_file) as a better guess, never below
        the first guess nor above RESTORED_CAP_S: this guard's slurmctld may be slower or faster
        now. The first poll that times an update replaces it, as it replaces the guess."""
        self.seconds = min(max(seconds, FIRST_GUESS_S), RESTORED_CAP_S)
        self.restored = True


def remaining_s(job: RunningJob) -> float:
    """Seconds left of the job's limit (a shortened job: it has one)."""
    return (job.limit_minutes or 0) * 60.0 - job.elapsed_s


def due_jobs(
    shortened: Sequence[RunningJob],
    lead_s: float,
    update_s: float,
    per_poll: int,
    poll_s: float,
) -> list[tuple[RunningJob, float]]:
    """The jobs to extend now, closest to their limit first, each with the time its new limit must
    leave it: the lead, the time to reach it in this round (at least what it has left: a job due only
    because one behind it is must still be extended) and that to go round the backlog once more, so
    that the next round reaches it again in time."""
    ordered = sorted(shortened, key=remaining_s)

    def reach(rank: int) -> float:  # a poll period of it is room the lead holds (config: >= 2 polls)
        return max(0.0, rank * update_s + (rank // per_poll) * poll_s - poll_s)

    due = [rank for rank, job in enumerate(ordered) if remaining_s(job) <= lead_s + reach(rank)]
    if not due:
        return []
    again = reach(due[-1])
    return [
        (job, max(lead_s + reach(rank), remaining_s(job)) + again)
        for rank, job in enumerate(ordered[: due[-1] + 1])
    ]
