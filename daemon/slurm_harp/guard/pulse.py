"""The end of a poll: its heartbeat, then its result in the metrics, as the daemon will see it.

A poll counts as good (``harp_guard_polls_total{result="ok"}``, and the time of the last good poll,
which HarpGuardStale watches) only once its heartbeat is written: a guard that extends jobs but
cannot write the heartbeat (its runtime directory gone, /run full, a path outside the unit's
writable directories) is a guard the daemon takes for down, and stops shortening new jobs for. Its
metrics said healthy; now they say what the daemon sees. The poll's extensions are made first
all the same: a heartbeat that cannot be written never stops the guard from extending the jobs
already shortened.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.heartbeat import HeartbeatFile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PollReport:
    listed: int  # running jobs seen
    shortened: int  # of them below their user's own limit
    due: int  # of them due for an extension now
    outcomes: tuple[tuple[str, str], ...]  # (job id, result) per attempt
    beat: bool = True  # the heartbeat was written (or not tried: an extension-less failure)

    @property
    def extended(self) -> bool:
        """Not a poll whose every extension attempt failed."""
        return not self.outcomes or any(result != results.FAILED for _, result in self.outcomes)

    @property
    def good(self) -> bool:
        """A poll whose extensions did not all fail and whose heartbeat was written."""
        return self.extended and self.beat


class Pulse:
    """Counts each poll, and beats the heartbeat for a good one."""

    def __init__(self, metrics: GuardMetrics) -> None:
        self._metrics = metrics
        self._unwritten: str | None = None  # why the heartbeat was last not written (said once)

    def failed(self) -> None:
        """A poll that is no good one: no heartbeat, the last good poll's time kept."""
        self._metrics.polls.labels("failed").inc()

    def beat(self, heartbeat: HeartbeatFile, now: float) -> bool:
        """Write the heartbeat and count the poll good (the last good poll: ``now``); or, when it
        cannot be written, count the poll failed, logged once until the problem changes."""
        try:
            heartbeat.beat()
        except OSError as exc:
            problem = f"{heartbeat.path} not written ({exc})"
            if problem != self._unwritten:
                log.error("heartbeat %s: polls count as failed; the daemon stops shortening jobs", problem)
                self._unwritten = problem
            self.failed()
            return False
        if self._unwritten is not None:
            log.info("heartbeat %s written again", heartbeat.path)
            self._unwritten = None
        self._metrics.polls.labels("ok").inc()
        self._metrics.last_success.set(now)
        return True
