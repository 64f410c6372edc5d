"""Whether the guard's `scontrol update` works, as its attempts tell: while it is not known to, no
heartbeat, so that the daemon shortens no new job that nothing could extend.

A poll whose every attempt failed (no operator rights, say: FAILED, not a job gone or refused at a
site bound) starts a failing spell: no poll refreshes the heartbeat until an update succeeds. Judged
poll by poll, a guard without rights refreshed it in every poll that had no job due, most of them,
and the daemon went on shortening jobs that were then killed at their cut.

An update succeeds only where one is tried, and no job may be due for long. So while failing the
guard extends the shortened job closest to its limit early, once a minute (guard.loop): a real
extension, within the user's own limit and the site's bounds as any, so that rights regained are
seen within a minute. No call that changes nothing would tell: Slurm 22.05 (_update_job) takes a
limit set to the one a job has from its owner or its account's coordinator as from an operator, and
lets a user raise their pending job's. With no job to try (none running, or each refused at a
bound) for LAPSE_S, the spell lapses: the heartbeat is refreshed again, and the first shortened job
seen running is extended early to see. A guard still without rights thus lets the daemon shorten
the jobs submitted from the lapse until that job runs, which are then killed at their cut; staying
stale instead, one passing failure (slurmctld busy as the last due job ended) kept harp from
shortening any job on a quiet cluster for good, as no shortened job came to try.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.pulse import PollReport

log = logging.getLogger(__name__)

# While no update is known to work: one job extended early this often, to see whether one does.
PROBE_INTERVAL_S = 60.0
# A failing spell with no job to try for this long lapses (see the module's note).
LAPSE_S = 600.0
# The results of an attempt that `scontrol update` took.
_UPDATED = frozenset({results.EXTENDED, results.REACHED_REQUEST, results.CAPPED})


class UpdateRights:
    """The failing spells of the guard's updates, followed poll by poll (see the module's note)."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self.failing = False  # in a failing spell: no heartbeat
        self._unproven = False  # no update has succeeded since the last spell started
        self._tried_at = -math.inf  # the last poll with an attempt, on the monotonic clock

    def probe_due(self) -> bool:
        """Whether to extend a job early to see whether an update works (see the module's note)."""
        return self._unproven and self._monotonic() - self._tried_at >= PROBE_INTERVAL_S

    def follow(self, report: PollReport) -> None:
        """After a poll that listed the jobs: start, end or lapse a failing spell (each said once)."""
        now = self._monotonic()
        done = {result for _, result in report.outcomes}
        if done:
            self._tried_at = now
        if done & _UPDATED:
            if self._unproven:
                log.info("an scontrol update succeeded again: heartbeat refreshed")
            self.failing = self._unproven = False
        elif not report.extended:
            if not self.failing:
                log.error(
                    "every extension failed: heartbeat not refreshed until an scontrol update succeeds "
                    "(new jobs keep their limits); a shortened job is extended early each minute to see"
                )
            self.failing = self._unproven = True
        elif self.failing and now - self._tried_at >= LAPSE_S:
            log.warning(
                "no job to extend for %.0f s since every extension failed: heartbeat refreshed again; "
                "the next shortened job seen running is extended early to see whether updates work",
                now - self._tried_at,
            )
            self.failing = False
