"""The guard's heartbeat: a file `harp guard` touches after each good poll, and the daemon reads
before it shortens a job (time_min and extend modes need a live guard).

The modification time is the heartbeat: no IPC, and a dead guard's file simply ages. While the guard
is alive the daemon stat()s it at most once per RECHECK_SECONDS, not on every submission (after idle
a stat costs about as much as the rest of the policy), so a removed file (a clean stop: systemd
removes the runtime directory) is noticed within that second. The file lives on the controller
host that runs both (docs/guard.md).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

RECHECK_SECONDS = 1.0


class HeartbeatFile:
    def __init__(self, path: Path, stale_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.stale_seconds = stale_seconds
        self._clock = clock
        self._seen: tuple[float, float] | None = None  # a live answer: (when stat()ed, the mtime)

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
        alive = mtime is not None and now - mtime <= self.stale_seconds
        self._seen = (now, mtime) if alive and mtime is not None else None
        return alive

    def _mtime(self) -> float | None:
        try:
            return self.path.stat().st_mtime
        except OSError:
            return None
