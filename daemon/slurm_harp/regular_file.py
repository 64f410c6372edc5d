"""Reading a file that an operator or another process controls (the configuration, the model store's
files, the guard's extension file; the job store, which SQLite opens) only when it is a regular file.

open() of a FIFO waits for a writer, for good when none comes: `harp serve` at start or on SIGHUP,
`harp check-config`, the guard's poll or the daemon's history thread would hang. A device may block or
never end, and a directory or a socket is no file to read either. The file is opened with O_NONBLOCK,
which makes open() of a FIFO return at once, and fstat()ed: anything but a regular file is refused
with NotRegularFile, an OSError naming the path and what is there, as an unreadable file would be.

``read_json`` reads such a file of harp's own (the guard's state, its extension file, the model
store's cards and verdicts) as JSON, up to a size beyond which it cannot be one of them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFile(OSError):
    """``path`` is a FIFO, a socket, a device, a directory (or a link where none may be)."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(None, f"{kind}, not a regular file", str(path))

    def __str__(self) -> str:
        return f"{self.filename} is {self.strerror}"


class TooLarge(ValueError):
    """The file is larger than any of its kind harp writes."""


class NotJSON(ValueError):
    """The file's bytes are not JSON; ``reason`` is the decoder's."""

    def __init__(self, path: Path | str, reason: Exception) -> None:
        super().__init__(f"{path}: not JSON ({reason})")
        self.reason = reason


def _refuse(path: Path | str, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, next((kind for test, kind in _KINDS if test(mode)), "no regular file"))


def refuse_non_regular(path: Path | str) -> None:
    """For a file another library opens by its path (SQLite): NotRegularFile when something other
    than a regular file is there; nothing when nothing is (the opener says so its own way)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    _refuse(path, mode)


@contextlib.contextmanager
def open_regular(path: Path | str, *, follow_links: bool = True) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """The regular file at ``path`` opened for reading, with its fstat: a caller may refuse it by its
    size before a byte is read. ``follow_links=False``: a symbolic link is refused too.
    FileNotFoundError passes through; NotRegularFile, or the OSError of open(), for the rest."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise NotRegularFile(path, "a symbolic link") from None
        if exc.errno == errno.ENXIO:  # what open() of a socket says
            refuse_non_regular(path)
        raise
    try:
        st = os.fstat(fd)
        _refuse(path, st.st_mode)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            yield handle, st
    finally:
        os.close(fd)


def read_regular(path: Path | str, *, follow_links: bool = True, size: int = -1) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``size`` of them when it is not -1), as
    ``open_regular`` opens it; the OSError of read() too."""
    with open_regular(path, follow_links=follow_links) as (handle, _):
        return handle.read(size)


def read_capped(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, a link refused (``read_regular``); TooLarge beyond
    ``max_bytes``, of which no more than one is read."""
    raw = read_regular(path, follow_links=False, size=max_bytes + 1)
    if len(raw) > max_bytes:
        raise TooLarge(f"{path}: larger than {max_bytes} bytes")
    return raw


def read_json(path: Path | str, max_bytes: int, *, allow_nan: bool = True) -> Any:
    """The JSON value of the regular file at ``path``, a link refused (``read_regular``, whose
    OSErrors pass through); TooLarge beyond ``max_bytes`` (``read_capped``), NotJSON for whatever
    does not decode (``allow_nan``: as decode_json's)."""
    raw = read_capped(path, max_bytes)
    try:
        return decode_json(raw, allow_nan=allow_nan)
    except ValueError as exc:
        raise NotJSON(path, exc) from None


def decode_json(
    raw: bytes | str,
    *,
    allow_nan: bool = True,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """``raw`` as JSON, or ValueError for whatever does not read as such: bad UTF-8 or syntax, an
    integer of more digits than Python converts, and nesting deeper than the parser recurses, whose
    RecursionError would otherwise escape every caller's ValueError (a corrupt state file or card
    then ended `harp guard` or `harp serve` with a traceback). ``allow_nan=False``: NaN, Infinity
    and -Infinity (no JSON, but Python's parser reads them) and numbers past a float's range (read
    as infinities) are refused too, as json.dumps(allow_nan=False) refuses to write them.
    ``object_pairs_hook``: json.loads', to see a key an object holds twice."""
    try:
        if allow_nan:
            return json.loads(raw, object_pairs_hook=object_pairs_hook)
        return json.loads(
            raw, parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=object_pairs_hook
        )
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond a float's range")
    return value
