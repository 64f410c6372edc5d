"""A directory of model versions per target, with an atomically switched CURRENT pointer.

Layout: root/<target>/<version>/{q0.50.onnx, ..., card.json} and root/<target>/CURRENT.
A version directory appears under its final name only once all its files are written and
fsynced (it is built in a hidden temp directory and renamed), and CURRENT is replaced with
os.replace only after that, so a reader never sees a half-written model.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_harp.core.request import Target
from slurm_harp.model import verdict as verdicts
from slurm_harp.model.card import CARD_FILE, PROMOTION_FILE, complete_card
from slurm_harp.model.store_files import linked, read_current, refuse_links
from slurm_harp.state_dir import DIR_MODE, FILE_MODE, adopt, fsync_dir, make_dirs, replace_file

CURRENT_FILE = "CURRENT"
# At the store's root, beside the target directories: no reader lists the root, and its name is
# no version's. Only writers (`harp train`, `harp nightly`) take it; the daemon never does.
LOCK_FILE = ".harp-train.lock"
VERSION_NAME = re.compile(r"^[0-9]{8}T[0-9]{6}\.[0-9]{6}Z$")
_TIME_FORMAT = "%Y%m%dT%H%M%S.%fZ"
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A card that is not there, as Path.is_file takes them: no complete version.
_NO_FILE = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Current:
    """What a target's CURRENT says, read once, for readers that must go on when it is damaged."""

    names: str | None  # the version it names (None: no CURRENT, or unreadable)
    path: Path | None  # that version's directory, when there is one
    unreadable: str | None = None  # why CURRENT cannot be read: a bad name, a link, a FIFO, EIO

    @property
    def missing(self) -> bool:
        """CURRENT names a version whose directory is not in the store."""
        return self.names is not None and self.path is None


class StoreBusy(Exception):
    """Another process holds the store's writer lock."""


class NoVersionName(OSError):
    """No name sorts after the newest version's (one named 99991231T235959.999999Z): a store fault,
    as a full disk is, for the caller that publishes."""


class LinkedTarget(OSError):
    """A target directory that is a symbolic link: no version in it would ever be loaded, judged or
    pruned (store_files.linked), so nothing is published there: a store fault for the caller."""


class ModelStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def target_dir(self, target: Target | str) -> Path:
        return self.root / Target(target).value

    @contextlib.contextmanager
    def writer(self) -> Iterator[None]:
        """Hold the store for one writer: publish, promote and prune of two runs at once would
        interleave (one's prune deleting what the other just published or promoted). Never
        waits: raises StoreBusy naming the holder's pid when another process has it. The lock
        (flock) goes with the process, so a crashed run leaves nothing to clean up."""
        make_dirs(self.root)
        path = self.root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                # Its first line: a writer that did not truncate may leave a longer pid's tail after it.
                text = os.pread(fd, 32, 0).decode(errors="replace")
                holder = (text.splitlines() or [""])[0].strip() or "?"
                raise StoreBusy(f"{path} is held by another harp train or nightly (pid {holder})") from None
            adopt(path)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    def publish(
        self,
        target: Target | str,
        files: Mapping[str, bytes],
        card: Mapping[str, Any],
        make_current: bool = True,
        awaiting_verdict: bool = False,
    ) -> str:
        """Write a new version (files + card.json) and, by default, point CURRENT at it.
        ``awaiting_verdict``: it appears with model.verdict's PENDING_VERDICT, for write_verdict to
        replace."""
        target_dir = self.target_dir(target)
        make_dirs(target_dir)
        if linked(target_dir) is not None:
            raise LinkedTarget(f"{target_dir} is a symbolic link: the store serves only its own files")
        for name in files:
            if not _FILE_NAME.match(name) or name in (CARD_FILE, CURRENT_FILE):
                raise ValueError(f"bad model file name {name!r}")
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target_dir))
        try:
            os.chmod(tmp, DIR_MODE)  # mkdtemp makes 0700; the daemon runs as the group's member
            adopt(tmp)
            version = self._new_version(target_dir)
            full_card = complete_card(card, Target(target).value, version, files)
            for name, data in files.items():
                _write_synced(tmp / name, data)
            _write_synced(
                tmp / CARD_FILE, json.dumps(full_card, indent=2, sort_keys=True, allow_nan=False).encode()
            )
            if awaiting_verdict:  # in the temp directory: no moment where the version is unmarked
                _write_synced(
                    tmp / PROMOTION_FILE, json.dumps(verdicts.PENDING_VERDICT, sort_keys=True).encode()
                )
            fsync_dir(tmp)
            os.rename(tmp, target_dir / version)
        except BaseException:
            _remove_tree(tmp)
            raise
        fsync_dir(target_dir)
        if make_current:
            self.set_current(target, version)
        return version

    def write_verdict(self, target: Target | str, version: str, verdict: Mapping[str, Any]) -> None:
        """Give a published version its promotion verdict (model.verdict.write), which verdict() reads."""
        verdicts.write(self.version_dir(target, version), verdict)

    def set_current(self, target: Target | str, version: str) -> None:
        """Point CURRENT at ``version``: ValueError (version_dir's) when it is no version to serve."""
        self.version_dir(target, version)
        replace_file(self.target_dir(target) / CURRENT_FILE, f"{version}\n".encode())

    def version_dir(self, target: Target | str, version: str) -> Path:
        """The directory of ``version`` of ``target``; ValueError when it is not a complete version
        (no version name, no card), its card cannot be looked at (naming the error), or it or the
        target's directory is a symbolic link."""
        target_dir = self.target_dir(target)
        if not VERSION_NAME.match(version):
            raise ValueError(f"no complete version {version[:80]!r} under {target_dir}")
        refuse_links(target_dir, version)
        path = target_dir / version
        complete = _has_card(path)
        if isinstance(complete, OSError):
            raise ValueError(f"version {version} under {target_dir} cannot be read: {complete}")
        if not complete:
            raise ValueError(f"no complete version {version!r} under {target_dir}")
        return path

    def current_version(self, target: Target | str) -> str | None:
        path = self.target_dir(target) / CURRENT_FILE
        refuse_links(path.parent)  # not even CURRENT is read through a link
        try:
            version = read_current(path).decode("utf-8", errors="replace").strip()
        except FileNotFoundError:
            return None
        if not VERSION_NAME.match(version):
            raise ValueError(f"{path}: bad version name {version[:80]!r}")
        return version

    def current_dir(self, target: Target | str) -> Path | None:
        """The directory CURRENT points at, or None when there is no CURRENT or no such version."""
        return self._dir_of(target, self.current_version(target))

    def _dir_of(self, target: Target | str, version: str | None) -> Path | None:
        if version is None:
            return None
        refuse_links(self.target_dir(target), version)
        path = self.target_dir(target) / version
        return path if path.is_dir() else None

    def current(self, target: Target | str) -> Current:
        """current_version and current_dir without raising, CURRENT read once (at every store poll):
        a CURRENT that cannot be read says why."""
        try:
            version = self.current_version(target)
            return Current(version, self._dir_of(target, version))
        except (OSError, ValueError) as exc:
            return Current(None, None, str(exc))

    def versions(self, target: Target | str) -> list[str]:
        """Complete versions, oldest first (names sort by creation time). A version that is a
        symbolic link is none, nor is any in a target directory that is one (``linked``). One whose
        card cannot be looked at is listed (``_has_card``): its load says why it fails."""
        target_dir = self.target_dir(target)
        if not target_dir.is_dir() or linked(target_dir) is not None:
            return []
        return sorted(
            p.name
            for p in target_dir.iterdir()
            if VERSION_NAME.match(p.name) and linked(target_dir, p.name) is None and _has_card(p) is not False
        )

    def unreadable(self, target: Target | str, version: str) -> str | None:
        """Why ``version``'s card cannot be looked at (a directory the caller may not search), or None."""
        complete = _has_card(self.target_dir(target) / version)
        return str(complete) if isinstance(complete, OSError) else None

    def owner(self, version: str) -> Target | None:
        """The target whose directory holds ``version``, or None: a job's tag names the versions
        that served it, not their targets (version names are unique across targets)."""
        if not VERSION_NAME.match(version):
            return None
        return next((t for t in Target if (self.target_dir(t) / version).is_dir()), None)

    def verdict(self, target: Target | str, version: str) -> dict[str, Any] | None:
        """The promotion verdict on ``version``, written by write_verdict for learning.pipeline, or
        None when it has none; one that cannot be read is a refusal (model.verdict.read)."""
        return verdicts.read(self.target_dir(target) / version)

    def refusal(self, target: Target | str, version: str) -> str | None:
        """Why ``version`` may not serve in a fallback, or None (model.verdict.refusal)."""
        return verdicts.refusal(self.verdict(target, version))

    def refused(self, target: Target | str, version: str) -> bool:
        """Whether ``refusal`` gives a reason."""
        return self.refusal(target, version) is not None

    @staticmethod
    def _new_version(target_dir: Path) -> str:
        # Microsecond UTC timestamps sort as strings; bump past any name already taken. A clock
        # gone back (NTP correcting a clock that ran ahead) must not name a version older than the
        # newest one: retention would prune it at once and keep the others, the daemon's fallback
        # and `harp rollback` take the newest name for the newest version. Names stay in order.
        # A name that reads as no time (20261399T000000.000000Z: made by hand, a bad restore) is
        # passed over, logged: it failed every publish of the target, night after night.
        moment = datetime.now(UTC)
        times = [_time_of(p) for p in target_dir.iterdir() if VERSION_NAME.match(p.name)]
        moment = max([moment, *(t for t in times if t is not None)])  # bumped past a name taken below
        while True:
            name = moment.strftime(_TIME_FORMAT)
            if not os.path.lexists(target_dir / name):
                return name
            try:
                moment += timedelta(microseconds=1)
            except OverflowError:  # a version named 99991231T235959.999999Z
                raise NoVersionName(f"{target_dir}: no version name sorts after {name}") from None


def _has_card(version_dir: Path) -> bool | OSError:
    """Whether ``version_dir`` holds its card, a complete version's last file, or the error that keeps
    that from being known: a directory the caller may not search (copied in by root with umask 077).
    Such a one is a version all the same, whose load names the error: Path.is_file raised it, and one
    unreadable version failed every listing of its target (the daemon's fallback, `harp models`,
    `harp rollback`, prune)."""
    try:
        return stat.S_ISREG(os.stat(version_dir / CARD_FILE).st_mode)
    except OSError as exc:
        return False if exc.errno in _NO_FILE else exc


def _time_of(version_dir: Path) -> datetime | None:
    """The time a version's name says, or None, logged, when it says none."""
    try:
        return datetime.strptime(version_dir.name, _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        log.warning("%s is named like a version but names no time: passed over", version_dir)
        return None


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(fd, FILE_MODE)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    adopt(path)


def _remove_tree(path: Path) -> None:
    if not path.exists():
        return
    for child in path.iterdir():
        child.unlink()
    path.rmdir()
