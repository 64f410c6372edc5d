"""The guard's heartbeat: a file `harp guard` touches after each good poll, and the daemon reads
before it shortens a job (time_min and extend modes need a live guard).

The modification time is the heartbeat: one stat() per submission, no IPC, and a dead guard's
file simply ages. The file lives on the controller host that runs both (docs/guard.md).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


class HeartbeatFile:
    def __init__(self, path: Path, stale_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.stale_seconds = stale_seconds
        self._clock = clock

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
        try:
            return self._clock() - self.path.stat().st_mtime
        except OSError:
            return None

    def alive(self) -> bool:
        age = self.age()
        return age is not None and age <= self.stale_seconds
