"""Directories this process may not enter, for tests of a store holding one (a version copied in by
root with umask 077, which the daemon's user may not search): the ``lock_out`` fixture (conftest).

Not root: the directory's mode is 000 until the test ends. Root passes any mode (and CI runs as
root), so there the os calls that need the permissions are refused instead, as the kernel refuses
them: stat below the directory, open and listing of it or below it, each a PermissionError naming
the path. A stat or lstat of the directory itself passes, as it does for any user.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

# os calls the store makes, and whether the directory itself is refused to them (not only below it).
_REFUSED = (("stat", False), ("lstat", False), ("open", True), ("listdir", True), ("scandir", True))


class LockOut:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self._locked: dict[str, int] = {}  # absolute path: its mode before

    def __call__(self, directory: Path) -> None:
        path = os.path.abspath(directory)
        if os.geteuid() != 0:
            self._locked[path] = os.stat(path).st_mode & 0o7777
            os.chmod(path, 0)
            return
        if not self._locked:
            for name, itself in _REFUSED:
                self._monkeypatch.setattr(os, name, self._refusing(getattr(os, name), itself))
        self._locked[path] = 0

    def give_back(self) -> None:
        if os.geteuid() != 0:
            for path, mode in self._locked.items():
                os.chmod(path, mode)

    def _refusing(self, call: Callable[..., object], itself: bool) -> Callable[..., object]:
        def refused(*args: object, **kwargs: object) -> object:
            path = args[0] if args else kwargs.get("path")
            if isinstance(path, str | bytes | os.PathLike) and kwargs.get("dir_fd") is None:
                name = os.path.abspath(os.fsdecode(path))
                if any(name.startswith(d + os.sep) or (itself and name == d) for d in self._locked):
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
            return call(*args, **kwargs)

        return refused
