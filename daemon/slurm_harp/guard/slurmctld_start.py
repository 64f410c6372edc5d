"""When the slurmctld answering the guard started (`scontrol show config`'s BOOT_TIME): which one
holds a running job's latest raise, so that a limit down from that raise can be told from its
user's lowering (guard.lowered_limits).

slurmctld saves job state at most every 5 s (22.05 state_save.c, SAVE_MAX_WAIT). One that dies
before it saved an `scontrol update TimeLimit=` (a crash, the OOM killer, its host down) comes back,
or its backup takes over, with the limit from before the update: with two guards' updates (40 to
50, then 60), the one it saved (50), above the limit before the raise the guard listed (40). So,
past a second guard's late landing (guard.lowered_limits), a running job's limit comes down from
above the one before its latest raise only by a user or an admin, who lower it through the
slurmctld that holds the raise, or by such a loss, which needs another slurmctld than the one seen
holding it. BOOT_TIME tells them apart: slurmctld sets it once, as its
process starts (22.05 controller.c, _init_config). A restart gives a new one; a standby backup that
takes over keeps its own, that of another process, usually older than the raise (so a start after
the raise would not do). Not told apart: two controllers started within the same second (BOOT_TIME
has whole seconds). A drop from a limit already at or below the one before the raise is no loss of
it, whichever slurmctld lists it: the raise was gone before, and the drop that took it away was
judged as it was listed.

A raise is placed only when the start read just before the poll's listing and the one read after it
agree: the same slurmctld answered before and after, so it listed the raise. Read after alone, the
start may be that of a standby backup, started days before, that took over as the listing's
slurmctld died with the raise unsaved: the raise placed with the backup, its listing of the limit
from before the raise would read as a lowering. Reads are made only when needed, at most two a
poll: before the listing, in a poll that may place a raise (one seen and not yet placed, one the
guard asked for since the last listing, or once a minute while a raise is held, so that after a
clean restart or takeover the slurmctld answering is soon known to hold the raises it lists); after
it, in such a poll, or one that lists such a drop, a read guard.enforcement shares
(guard.slurm.ConfigAfterListing). A raise the guard did not ask for (an admin's) is placed at the
poll after it is first listed. A read that fails or does not read (logged, once until one does)
knows no slurmctld: such a drop is then taken for a restart's. That choice may extend a job past
its user's lowering, never past the user's own request (``t0``); the other would stop a
job whose update was lost at harp's cut.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from slurm_harp.accounting.fields import SLURM_ZONE, parse_moment
from slurm_harp.guard.slurm import CONFIG_ARGV, Completed, ConfigAfterListing, Runner
from slurm_harp.slurm_formats import config_value

if TYPE_CHECKING:
    from slurm_harp.guard.lowered_limits import Seen

log = logging.getLogger(__name__)

# While a raise is held, its slurmctld is read again this often (a monotonic clock).
REREAD_S = 60.0


class SlurmctldStart:
    """The BOOT_TIME of the slurmctld answering, read before a poll's listing and after it, each at
    most once and only when needed (see the module's note)."""

    def __init__(self, run: Runner, config: ConfigAfterListing) -> None:
        """``config``: the read after the poll's listing, shared with guard.enforcement; a new poll
        for it starts at start_poll."""
        self._run = run
        self._config = config
        self._before: int | None = None  # read before this poll's listing; None: not read, or not read well
        self._read = False  # after the listing, in this poll
        self._boot: int | None = None  # as read then
        self._placed_at = -math.inf  # monotonic: the last poll that read before its listing
        self._failing = False  # logged once until a read works again

    def start_poll(self, now: float, seen: Iterable[Seen], asked: bool) -> None:
        """Before a poll's listing (``now``: monotonic): read the start if this poll may place a
        raise, one of the jobs ``seen`` holds or one the guard ``asked`` for in the poll before."""
        self._read, self._before = False, None
        self._config.new_poll()
        raised = [s.raise_held_by for s in seen if _holds_raise(s)]
        if asked or None in raised or (raised and now - self._placed_at >= REREAD_S):
            self._placed_at = now
            self._before = self._read_boot(self._run(CONFIG_ARGV))

    def boot(self) -> int | None:
        """The BOOT_TIME (Unix seconds) of the slurmctld answering after this poll's listing; None
        when it does not read."""
        if not self._read:
            self._read = True
            self._boot = self._read_boot(self._config.read())
        return self._boot

    def undone(self, job_id: str, seen: Seen, was: int) -> bool:
        """Whether a running job's limit, below the highest seen, is slurmctld's state from before
        its latest raise (logged): dropped in this listing from ``was``, above the limit before the
        raise, listed by a slurmctld not seen holding the raise. Dropped to any limit, not only to
        the one before the raise: two guards' raises (from 40 to 50, then 60) leave a slurmctld that
        saved only the first one at 50. A drop is judged once, as it is listed: a lowering stays one."""
        before = seen.raised_from  # the limit before the raise
        if before is None or seen.limit >= was or was <= before:
            return False
        boot = self.boot()
        if boot is not None and boot == seen.raise_held_by:
            return False  # the slurmctld that held the raise lists the drop: someone lowered it
        why = "its start does not read" if boot is None else "not the one seen holding the raise"
        log.warning(
            "job %s: limit %d -> %d min, down from its latest raise (from %d min), listed by a "
            "slurmctld that may have restarted since (%s): taken for its state from before the "
            "raise, not a lowering; extended again when due",
            job_id, was, seen.limit, before, why,
        )  # fmt: skip
        return True

    def hold(self, seen: Seen) -> None:
        """Note the slurmctld that lists a running job's latest raise, in a poll that read its start
        before the listing and reads the same after it: until then, or once another answers, a drop
        to the limit before the raise is no lowering."""
        if _holds_raise(seen) and self._before is not None and self.boot() == self._before:
            seen.raise_held_by = self._before

    def _read_boot(self, done: Completed) -> int | None:
        boot, why = None, f"exit {done.returncode}: {done.stderr.strip():.200}"
        if done.returncode == 0:
            boot, why = _boot_time(done.stdout)
        if boot is None and not self._failing:
            log.warning(
                "slurmctld's start does not read (%s): a running job's limit down from its latest "
                "raise is taken for a slurmctld restart's, not a lowering", why,
            )  # fmt: skip
        elif boot is not None and self._failing:
            log.info("slurmctld's start reads again")
        self._failing = boot is None
        return boot


def _boot_time(text: str) -> tuple[int | None, str]:
    """BOOT_TIME in ``scontrol show config``'s ``Key = Value`` lines, in SLURM_ZONE (guard.slurm), or
    None and why."""
    value = config_value(text, "BOOT_TIME")
    if value is None:
        return None, "no BOOT_TIME"
    try:
        return int(parse_moment(value, SLURM_ZONE)), ""
    except (ValueError, OverflowError):  # "Unknown" (0), or a form not known here
        return None, f"BOOT_TIME {value!r:.40}"


def _holds_raise(seen: Seen) -> bool:
    """Whether a job is running at a limit above the one before its latest raise."""
    return not seen.pending and seen.raised_from is not None and seen.limit > seen.raised_from
