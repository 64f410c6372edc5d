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

A beat anyone else could have written is no beat either (``untrusted``): a fresh file is taken only
when it is a regular file (a link is not followed), and it and its directory are owned by root, the
daemon's user or the directory's owner (the guard's user) and writable by no one else; the
directories above may be sticky (/tmp). Otherwise, with `[guard] heartbeat` pointed into a
directory others may write in (/tmp, a shared one), any user could touch the file, or link it to a
file they keep fresh, and jobs would be shortened with no guard to extend them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0
FUTURE_TOLERANCE_S = 2.0
_NOT_OWNERS = ", not root, this daemon's user or the owner of the heartbeat's directory"


class HeartbeatFile:
    def __init__(self, path: Path, stale_seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.stale_seconds = stale_seconds
        self._clock = clock
        self._seen: tuple[float, float] | None = None  # a live answer: (when stat()ed, the mtime)
        self._ahead_logged: float | None = None  # the future mtime last logged (said once)
        self._untrusted_logged: str | None = None  # the problem last logged (said once)

    def beat(self) -> None:
        """Refresh the heartbeat (atomic replace, readable by the daemon's user). On any failure the
        temporary file is removed again: one left per failed poll (a directory at the heartbeat's
        path) was 17,000 a day at the default poll. An OSError names the heartbeat, not the
        temporary file, whose name changes at each poll (guard.pulse says a problem once)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".heartbeat.")
        try:
            try:
                os.write(fd, f"{self._clock():.3f}\n".encode())
                os.fchmod(fd, 0o644)
            finally:
                os.close(fd)
            now = self._clock()
            os.utime(tmp, (now, now))
            os.replace(tmp, self.path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError) and exc.errno is not None:
                raise OSError(exc.errno, exc.strerror, str(self.path)) from None
            raise

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
        alive = (
            mtime is not None
            and now - mtime <= self.stale_seconds
            and not self._ahead(mtime, now)
            and self._trusted()
        )
        self._seen = (now, mtime) if alive and mtime is not None else None
        return alive

    def _mtime(self) -> float | None:
        try:
            return os.lstat(self.path).st_mtime
        except OSError:
            return None

    def _trusted(self) -> bool:
        """Whether no one but the guard's user could have written the beat (logged once for each
        problem, and once when it is gone)."""
        problem = untrusted(self.path)
        if problem != self._untrusted_logged:
            if problem is not None:
                log.error("heartbeat %s: %s; the guard counts as down", self.path, problem)
            elif self._untrusted_logged is not None:
                log.info("heartbeat %s: trusted again", self.path)
            self._untrusted_logged = problem
        return problem is None

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


def untrusted(path: Path) -> str | None:
    """Why another user could have put a fresh heartbeat at ``path``, or None when no one could: it
    is a regular file, not a link; it and its directory are owned by root, this process's user or
    the directory's owner (where the directory's parent is writable by no one else), and writable by
    no one else (a sticky directory still lets anyone create
    the file while it is missing); each directory above is owned by one of them and writable by no
    one else unless sticky. A link on the way is followed when one of them owns it."""
    try:
        st = os.lstat(path)
        directory = os.path.abspath(path.parent)
        owners = {0, os.geteuid()}
        # The directory's owner (the guard's user: systemd's RuntimeDirectory) only where no one else
        # could have made the directory: in a sticky /tmp, whoever made /tmp/harp first would be it.
        if not os.stat(os.path.dirname(directory)).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            owners.add(os.stat(directory).st_uid)
    except OSError as exc:
        return f"cannot be checked: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a symbolic link is not followed)"
    if st.st_uid not in owners:
        return f"is owned by uid {st.st_uid}{_NOT_OWNERS}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return _untrusted_dirs(Path(directory), owners, sticky=False)


def _untrusted_dirs(directory: Path, owners: set[int], sticky: bool) -> str | None:
    """``untrusted`` of ``directory`` and those above it; ``sticky``: whether ``directory`` itself
    may be sticky and writable by others (not the heartbeat's own)."""
    for part in (directory, *directory.parents):
        try:
            st = os.lstat(part)
        except OSError as exc:
            return f"cannot check {part}: {exc.strerror or exc}"
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in owners:
            return f"{part} on its path is owned by uid {st.st_uid}{_NOT_OWNERS}"
        if stat.S_ISLNK(st.st_mode):
            problem = _untrusted_dirs(part.resolve(), owners, sticky or part != directory)
            if problem is not None:
                return problem
            continue
        if not stat.S_ISDIR(st.st_mode):
            return f"{part} on its path is not a directory"
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not (
            mode & stat.S_ISVTX and (sticky or part != directory)
        ):
            return f"{part} on its path is writable by group or others (mode {mode:04o})"
    return None
