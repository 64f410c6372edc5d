"""When the slurmctld answering the guard started (`scontrol show config`'s BOOT_TIME): which one
holds a running job's latest raise, so that a limit back at or below the one before that raise can
be told from its user's lowering (guard.lowered_limits).

slurmctld saves job state at most every 5 s (22.05 state_save.c, SAVE_MAX_WAIT). One that dies
before it saved an `scontrol update TimeLimit=` (a crash, the OOM killer, its host down) comes back,
or its backup takes over, with the limit from before the update. So a running job's limit comes
down from above the one before its latest raise to it or below only by a user or an admin, who
lower it through the slurmctld that holds the raise, or by such a loss, which needs another
slurmctld than the one seen holding it. BOOT_TIME tells them apart: slurmctld sets it once, as its
process starts (22.05 controller.c, _init_config). A restart gives a new one; a standby backup that
takes over keeps its own, that of another process, usually older than the raise (so a start after
the raise would not do). Not told apart: two controllers started within the same second (BOOT_TIME
has whole seconds). A drop from a limit already at or below the one before the raise is no loss of
it, whichever slurmctld lists it: the raise was gone before, and the drop that took it away was
judged as it was listed.

It is read at most once a poll, and only when needed: a raise not yet placed, such a drop, and
once a minute while a raise is held, so that after a clean restart or takeover the slurmctld
answering is soon known to hold the raises it lists. One that started after the poll's listing
began may not be the one that listed it, and is not taken to hold what it listed. A read that fails
or does not read (logged, once until one does) knows no slurmctld: such a drop is then taken for a
restart's. That choice may extend a job past its user's lowering, never past the user's own
request (``t0``); the other would stop a job whose update was lost at harp's cut.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

from slurm_harp.accounting.fields import SLURM_ZONE, parse_moment
from slurm_harp.guard.slurm import Runner

if TYPE_CHECKING:
    from slurm_harp.guard.lowered_limits import Seen

log = logging.getLogger(__name__)

CONFIG_ARGV = ("scontrol", "show", "config")
# While a raise is held, the slurmctld answering is read again this often (a monotonic clock).
REREAD_S = 60.0


class SlurmctldStart:
    """The BOOT_TIME of the slurmctld answering, read when asked, at most once a poll."""

    def __init__(self, run: Runner) -> None:
        self._run = run
        self._listed_at = -math.inf  # wall clock: when this poll's listing began
        self._now = self._read_at = -math.inf  # monotonic: this poll's start, the last read
        self._read = False  # in this poll
        self._boot: int | None = None  # as read in this poll
        self._failing = False  # logged once until a read works again

    def start_poll(self, listed_at: float, now: float) -> None:
        """A poll whose listing began at ``listed_at`` (wall clock; ``now`` monotonic)."""
        self._listed_at, self._now, self._read = listed_at, now, False

    def due(self) -> bool:
        """Whether reading it costs nothing more (read in this poll) or is a minute old."""
        return self._read or self._now - self._read_at >= REREAD_S

    def boot(self) -> int | None:
        """The BOOT_TIME (Unix seconds) of the slurmctld answering, read in this poll; None when it
        does not read."""
        if not self._read:
            self._read, self._read_at = True, self._now
            self._boot = self._read_boot()
        return self._boot

    def lister(self) -> int | None:
        """The BOOT_TIME of the slurmctld that listed this poll's jobs: the one answering, if it
        started before the listing began; None when that is not known."""
        boot = self.boot()
        # BOOT_TIME drops the fraction: the process started up to a second after it.
        return boot if boot is not None and boot + 1 <= self._listed_at else None

    def undone(self, job_id: str, seen: Seen, was: int) -> bool:
        """Whether a running job's limit, below the highest seen, is slurmctld's state from before
        its latest raise (logged): dropped in this listing from ``was``, above the limit before the
        raise, to ``seen.limit``, at or below it, listed by a slurmctld not seen holding the raise. A
        drop is judged once, as it is listed: a lowering stays one."""
        before = seen.raised_from  # the limit before the raise
        if before is None or seen.limit >= was or seen.limit > before or was <= before:
            return False
        boot = self.boot()
        if boot is not None and boot == seen.raise_held_by:
            return False  # the slurmctld that held the raise lists the drop: someone lowered it
        why = "its start does not read" if boot is None else "not the one seen holding the raise"
        log.warning(
            "job %s: limit %d -> %d min, back at or below the %d min before its latest raise, listed "
            "by a slurmctld that may have restarted since (%s): taken for its state from before the "
            "raise, not a lowering; extended again when due",
            job_id, was, seen.limit, before, why,
        )  # fmt: skip
        return True

    def hold(self, seen: Seen) -> None:
        """Note the slurmctld that lists a running job's latest raise, when its start is read in
        this poll (or due): until then, or once another answers, a drop to the limit before the
        raise is no lowering."""
        if seen.raised_from is None or seen.limit <= seen.raised_from:
            return
        if seen.raise_held_by is None or self.due():
            lister = self.lister()
            if lister is not None:
                seen.raise_held_by = lister

    def _read_boot(self) -> int | None:
        done = self._run(CONFIG_ARGV)
        boot, why = None, f"exit {done.returncode}: {done.stderr.strip():.200}"
        if done.returncode == 0:
            boot, why = _boot_time(done.stdout)
        if boot is None and not self._failing:
            log.warning(
                "slurmctld's start does not read (%s): a running job's limit back at or below the one "
                "before its latest raise is taken for a slurmctld restart's, not a lowering", why,
            )  # fmt: skip
        elif boot is not None and self._failing:
            log.info("slurmctld's start reads again")
        self._failing = boot is None
        return boot


def _boot_time(text: str) -> tuple[int | None, str]:
    """BOOT_TIME in ``scontrol show config``'s ``Key = Value`` lines, in SLURM_ZONE (guard.slurm), or
    None and why."""
    for line in text.split("\n"):
        key, sep, value = line.partition("=")
        if sep and key.strip() == "BOOT_TIME":
            try:
                return int(parse_moment(value, SLURM_ZONE)), ""
            except (ValueError, OverflowError):  # "Unknown" (0), or a form not known here
                return None, f"BOOT_TIME {value.strip()!r:.40}"
    return None, "no BOOT_TIME"
