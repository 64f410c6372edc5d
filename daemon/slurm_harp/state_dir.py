"""The files and directories harp keeps state in (the job store, the model store, the guard's state
file): private to the service's user and group (0640/0750), and owned like the directory they are
made in.

Run by hand as root (a first `harp nightly` at install), harp would otherwise leave root-owned,
world-readable state that the slurm-harp timers can neither write nor replace.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from pathlib import Path

DIR_MODE = 0o750
FILE_MODE = 0o640
# Random bytes in the name of replace_at's hidden new file (hex: twice as many characters).
_NEW_FILE_BYTES = 6
NAME_MAX = 255  # bytes in a file name (Linux's filesystems)
# Of ``name`` in that hidden name, ".{name}-{hex}": at most what leaves room for the rest, so that
# a name that fits has a new file that fits (a 245-byte name failed, ENAMETOOLONG, on its new file)
_NEW_FILE_STEM = NAME_MAX - 2 - 2 * _NEW_FILE_BYTES


def adopt(path: Path) -> None:
    """Give ``path`` the owner and group of its directory when running as root (else a no-op:
    whatever a user creates is theirs already)."""
    if os.geteuid() != 0:
        return
    parent = path.parent.stat()
    st = path.lstat()
    if (st.st_uid, st.st_gid) != (parent.st_uid, parent.st_gid):
        os.lchown(path, parent.st_uid, parent.st_gid)


def _adopt_open(fd: int, parent: os.stat_result) -> None:
    """``adopt`` for an open file, in the directory ``parent`` is the status of."""
    if os.geteuid() != 0:
        return
    st = os.fstat(fd)
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
        _adopt_open(fd, directory.parent.stat())
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
    """``replace_at`` in ``path``'s directory, opened by name (harp's own state directories)."""
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        replace_at(directory, path.name, data, mode)
    finally:
        os.close(directory)


def replace_at(directory: int, name: str, data: bytes, mode: int) -> None:
    """Write ``data`` to a hidden new file in the directory open at ``directory``, fsync it, rename
    it over ``name`` there: readers see the old content or the new, never a part. A link at
    ``name`` is replaced, never followed (the new file is created exclusively, without following
    links): whoever may write in the directory cannot turn the write into one of another file. All
    by descriptor: a directory swapped for a link meanwhile changes nothing."""
    fd, tmp = _new_file(directory, name)
    try:
        os.fchmod(fd, mode)  # created 0600 until complete; the service runs as the group's member
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            _adopt_open(handle.fileno(), os.fstat(directory))
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=directory)
        raise
    os.fsync(directory)


def is_new_file_of(entry: str, name: str) -> bool:
    """Whether ``entry`` is named as the hidden new file ``replace_at`` makes for ``name`` (one its
    writer, killed, never renamed into place)."""
    return re.fullmatch(rf"\.{re.escape(_stem(name))}-[0-9a-f]{{{2 * _NEW_FILE_BYTES}}}", entry) is not None


def _stem(name: str) -> str:
    """``name`` cut to _NEW_FILE_STEM bytes, for the hidden new file's name (a character cut in two
    is held as surrogates, as os.fsdecode holds any byte that is not UTF-8)."""
    return os.fsdecode(os.fsencode(name)[:_NEW_FILE_STEM])


def _new_file(directory: int, name: str) -> tuple[int, str]:
    """A new empty file of an unforeseeable hidden name beside ``name`` (as mkstemp, by descriptor)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = f".{_stem(name)}-{secrets.token_hex(_NEW_FILE_BYTES)}"
        try:
            return os.open(tmp, flags, 0o600, dir_fd=directory), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", name)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
