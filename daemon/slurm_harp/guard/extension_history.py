"""What the guard's conditional extension learns from: the file `harp harvest` writes beside the job
store (accounting.extension_file), re-read when it changes.

A missing, unreadable or corrupt file never stops the guard. A missing one means Tsafrir's steps
(core.extension), as before any was read (a new site, or no `history.db`), even after a good one:
the file removed, the site's figures are not to be used. An unreadable or corrupt one keeps the last
good ratios, or the steps with none yet. Each problem is logged once, not every poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from slurm_harp.accounting import extension_file
from slurm_harp.core.extension import ConditionalRatios

log = logging.getLogger(__name__)

# The harvester rewrites the file every few minutes; a stat this often is free.
CHECK_S = 30.0


class ExtensionHistory:
    def __init__(self, path: Path | None, clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: monotonic, for the interval between checks (a wall clock stepped back an hour
        checked nothing for the hour)."""
        self.path = path
        self._clock = clock
        self._ratios: ConditionalRatios | None = None
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._checked = -float("inf")
        self._problem: str | None = None

    def ratios(self) -> ConditionalRatios | None:
        """The latest good ratios, None before any were read."""
        now = self._clock()
        if self.path is not None and now - self._checked >= CHECK_S:
            self._checked = now
            self._refresh(self.path)
        return self._ratios

    def _refresh(self, path: Path) -> None:
        try:
            st = path.stat()
            if (st.st_mtime_ns, st.st_size) == self._seen:
                return
            ratios, computed = extension_file.read(path)
        except FileNotFoundError as exc:  # removed (see the module's note)
            self._ratios, self._seen = None, None
            self._report(f"{exc}; extending by steps")
            return
        # OSError, ValueError, or anything else a file's content may raise: never the guard's poll.
        except Exception as exc:
            kept = "keeping the last good one" if self._ratios is not None else "extending by steps"
            self._report(f"{exc}; {kept}")
            return
        self._seen = (st.st_mtime_ns, st.st_size)
        self._ratios, self._problem = ratios, None
        log.info("extension history: %d ended jobs, computed %s", len(ratios), time.ctime(computed))

    def _report(self, problem: str) -> None:
        if problem != self._problem:
            log.warning("extension history %s: %s", self.path, problem)
            self._problem = problem
