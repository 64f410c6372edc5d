"""The guard's heartbeat: a file `harp guard` touches after each good poll, and the daemon reads
before it shortens a job (time_min and extend modes need a live guard).

The modification time is the heartbeat: no IPC, and a dead guard's file simply ages. While the guard
is alive the daemon stat()s it at most once per RECHECK_SECONDS, not on every submission (after idle
a stat costs about as much as the rest of the policy), so a removed file (a clean stop: systemd
removes the runtime directory) is noticed within that second. The file lives on the controller
host that runs both (docs/guard.md).

A beat more than FUTURE_TOLERANCE_S ahead of the clock is no beat: after the clock steps back, the
last beat of a guard that died just before would otherwise count as fresh for the step and
stale_seconds more, and the daemon would go on shortening jobs no guard extends. A live guard's
next beat is stamped with the new clock.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0
FUTURE_TOLERANCE_S = 2.0


class HeartbeatFile:
    def __init__(self, path: Path, stale_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.stale_seconds = stale_seconds
        self._clock = clock
        self._seen: tuple[float, float] | None = None  # a live answer: (when stat()ed, the mtime)
        self._ahead_logged: float | None = None  # the future mtime last logged (said once)

    def beat(self) -> None:
        """Refresh the heartbeat (atomic replace, readable by the daemon's user)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".heartbeat.")
        try:
            os.write(fd, f"{self._clock():.3f}\n".encode())
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        now = self._clock()
        os.utime(tmp, (now, now))
        os.replace(tmp, self.path)

    def age(self) -> float | None:
        """Seconds since the last beat, or None when there has been none."""
        mtime = self._mtime()
        return None if mtime is None else self._clock() - mtime

    def alive(self) -> bool:
        """A beat within stale_seconds, as the file stood at most RECHECK_SECONDS ago; only a
        live answer is kept (a guard coming back is seen at once)."""
        now = self._clock()
        seen = self._seen
        if (
            seen is not None
            and 0.0 <= now - seen[0] < RECHECK_SECONDS
            and now - seen[1] <= self.stale_seconds
        ):
            return True
        mtime = self._mtime()
        alive = mtime is not None and now - mtime <= self.stale_seconds and not self._ahead(mtime, now)
        self._seen = (now, mtime) if alive and mtime is not None else None
        return alive

    def _mtime(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None

    def _ahead(self, mtime: float, now: float) -> bool:
        """Whether ``mtime`` is in the future beyond the tolerance (logged once for each such mtime)."""
        if mtime - now <= FUTURE_TOLERANCE_S:
            return False
        if mtime != self._ahead_logged:
            log.warning(
                "heartbeat %s is %.0f s in the future (the clock went back?): the guard counts as down"
                " until it beats again",
                self.path, mtime - now,
            )  # fmt: skip
            self._ahead_logged = mtime
        return True
