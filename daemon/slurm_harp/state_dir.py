"""The files and directories harp keeps state in (the job store, the model store, the guard's state
file): private to the service's user and group (0640/0750), and owned like the directory they are
made in.

Run by hand as root (a first `harp nightly` at install), harp would otherwise leave root-owned,
world-readable state that the slurm-harp timers can neither write nor replace.
"""

from __future__ import annotations

import errno
import io
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

DIR_MODE = 0o750
FILE_MODE = 0o640
REPORT_MODE = 0o644  # the reports and plots of harp report, evaluate and simulate: an admin shares them


class Figure(Protocol):
    """A matplotlib figure, as far as ``replace_png`` uses it."""

    def savefig(self, *args: Any, **kwargs: Any) -> Any: ...


def adopt(path: Path) -> None:
    """Give ``path`` the owner and group of its directory when running as root (else a no-op:
    whatever a user creates is theirs already)."""
    if os.geteuid() != 0:
        return
    parent = path.parent.stat()
    st = path.lstat()
    if (st.st_uid, st.st_gid) != (parent.st_uid, parent.st_gid):
        os.lchown(path, parent.st_uid, parent.st_gid)


def _adopt_open(fd: int, directory: Path) -> None:
    """``adopt`` for an open file."""
    if os.geteuid() != 0:
        return
    parent, st = directory.stat(), os.fstat(fd)
    if (st.st_uid, st.st_gid) != (parent.st_uid, parent.st_gid):
        os.fchown(fd, parent.st_uid, parent.st_gid)


def make_dirs(path: Path) -> None:
    """``mkdir -p path``: each directory it creates gets DIR_MODE and is adopted, through a
    descriptor opened without following a link: a link swapped in for a directory just made (by
    whoever may write in its parent) is refused with an OSError naming it, its target untouched."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:  # another process made it meanwhile
            continue
        _settle_dir(directory)


def _settle_dir(directory: Path) -> None:
    """DIR_MODE (mkdir's mode passes through the umask) and ``adopt`` for a directory just made."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise OSError(exc.errno, "no longer the directory harp made (a link?)", str(directory)) from exc
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise OSError(errno.EPERM, "no longer the directory harp made", str(directory))
        os.fchmod(fd, DIR_MODE)
        _adopt_open(fd, directory.parent)
    finally:
        os.close(fd)


def create_file(path: Path) -> None:
    """Create ``path`` empty with FILE_MODE and adopt it, unless it exists."""
    make_dirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    adopt(path)


def replace_file(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Write ``data`` to a hidden temp file beside ``path``, fsync it, rename it over ``path``:
    readers see the old content or the new, never a part. A link at ``path`` is replaced, never
    followed (mkstemp creates its file exclusively): whoever may write in the directory cannot
    turn the write into one of another file."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600; the service runs as the group's member
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            _adopt_open(handle.fileno(), path.parent)  # by descriptor: the name may be swapped
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def replace_report(path: Path, text: str) -> None:
    """``replace_file`` for a report's text, REPORT_MODE."""
    replace_file(path, text.encode("utf-8"), REPORT_MODE)


def replace_png(path: Path, figure: Figure) -> None:
    """``replace_file`` for a figure drawn as PNG, REPORT_MODE."""
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    replace_file(path, png.getvalue(), REPORT_MODE)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
