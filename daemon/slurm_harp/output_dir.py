"""The directory `harp report`, `harp evaluate` and `harp simulate` write into (``--out DIR``),
opened once and written through its descriptor.

Run as root into a directory a user may write (their home, a shared one), every directory on the
path the user can write in is theirs to redirect: a symbolic link planted at DIR or at any
directory above it, or swapped in after a check, would make root replace the files of those names
wherever it points (a web server's index.html). So the path is walked from / (or the working
directory) one component at a time without following links, making the missing directories on
the way. A link is followed only when the caller or root owns it: whoever owns a link chose its
target (a link cannot be changed, only replaced, and a replacement is its maker's), and it is
checked and read on one inode (O_PATH), never looked up twice. Every file is then created and
renamed relative to the open directory: whatever becomes of the path meanwhile, the files land in
the directory that was checked (removed, in the one a new walk checks, as below).

The directories made for it are removed again on close if still empty (a command that failed before
writing leaves nothing behind), each by its name in its parent's descriptor, kept open since the
walk: a link or a file swapped in at that name is no empty directory and stays. A second command
given the same new DIR at once opened the directory the first made: should the first stop before
either writes, it removes that directory from under the second, in which no file can then be
created. The second then walks the path again as at its opening (the same checks, the directory
made anew, and removed by it in turn if it writes nothing) and writes there, its results kept.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Protocol

from slurm_harp.core.text import question_marks
from slurm_harp.state_dir import NAME_MAX, replace_at

REPORT_MODE = 0o644  # reports and plots: an admin shares them
MAX_LINKS = 40  # as the kernel's own path walk (ELOOP)
REOPENS = 3  # walks again when the directory open was removed, each time another command's doing
_LOOK = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC  # the entry itself, a link included, never opened


class Figure(Protocol):
    """A matplotlib figure, as far as ``png_of`` uses it."""

    def savefig(self, *args: Any, **kwargs: Any) -> Any: ...


class ForeignLink(OSError):
    """A symbolic link on the output path owned by neither the caller nor root."""

    def __init__(self, link: Path, uid: int) -> None:
        super().__init__(errno.EPERM, f"a symbolic link owned by uid {uid}, not by you or root", str(link))

    def __str__(self) -> str:
        return f"{self.filename} is {self.strerror}: give the path it points to if that is meant"


class WriteError(OSError):
    """A file of the output directory could not be written (no room, no permission, a name too
    long): names the file and the system's reason, for a one-line message."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"

    @classmethod
    def of(cls, exc: OSError, path: Path) -> WriteError:
        return cls(exc.errno, exc.strerror or str(exc), str(path))


class RemoveError(WriteError):
    """An earlier file of the output directory could not be removed before a run writes its own:
    said as such, not as a write (the name may be a directory)."""

    def __str__(self) -> str:
        return f"cannot remove {self.filename}: {self.strerror}"


class Made(NamedTuple):
    """A directory made on the way: its name in its parent, open (O_PATH) as ``parent``."""

    parent: int
    name: str


class OutputDir:
    """An output directory, open; ``path`` names it in messages."""

    def __init__(self, path: Path, fd: int, made: list[Made] | None = None) -> None:
        self.path = path
        self.fd = fd
        self.made = made or []

    @classmethod
    def open(cls, path: Path) -> OutputDir:
        """``mkdir -p path`` and open it, walking as the module says. OSError naming the path
        component at fault: ForeignLink, not a directory, too many links, no permission; the
        directories made on the way are then removed again."""
        made: list[Made] = []
        try:
            at = _walk(path, made)
            try:
                fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=at)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(path)) from None
            finally:
                os.close(at)
        except BaseException:
            _unmake(made)
            raise
        return cls(path, fd, made)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        """Write ``name`` as a new file renamed into place (``state_dir.replace_at``); its path.
        The text as UTF-8, each byte of a name that was not (a trace's or the configuration's file
        name, held as a surrogate) written as "?" by core.text's rule."""
        return self._write(name, question_marks(text).encode("utf-8", errors="replace"))

    def write_bytes(self, name: str, data: bytes) -> Path:
        """``write_text`` for bytes: a PNG drawn before (``png_of``)."""
        return self._write(name, data)

    def write_run(
        self, files: Mapping[str, str | bytes], *, table: tuple[str, str], names: Iterable[str]
    ) -> list[Path]:
        """Write one run's ``files`` (text as ``write_text``, bytes as drawn) and its ``table`` (name,
        text: what says the run is whole) over an earlier run's; their paths, the table's first.
        ``names``: every file a run of this kind may write here. All of them go first, the table
        before the rest, and the table is written last: a run whose write fails (WriteError) leaves
        no table claiming it complete, and no file of an earlier run beside its own."""
        name, text = table
        for old in dict.fromkeys([name, *names, *files]):
            self.remove(old)
        written = [
            self.write_bytes(n, data) if isinstance(data, bytes) else self.write_text(n, data)
            for n, data in files.items()
        ]
        return [self.write_text(name, text), *written]

    def too_long(self, names: Iterable[str]) -> str | None:
        """Why a file of one of ``names`` cannot be made here (longer than the file system's
        NAME_MAX), or None: asked before the work whose outputs they name, not after it."""
        try:
            limit = os.fpathconf(self.fd, "PC_NAME_MAX")
        except (OSError, ValueError):
            limit = -1
        limit = limit if limit > 0 else NAME_MAX  # unknown: Linux's, and most file systems'
        for name in names:
            if (size := len(os.fsencode(name))) > limit:
                why = f"{os.strerror(errno.ENAMETOOLONG)} ({size} bytes, over the {limit} a name may have)"
                return str(WriteError(errno.ENAMETOOLONG, why, str(self / name)))
        return None

    def remove(self, name: str) -> None:
        """Remove the file ``name`` if there (a link is removed, not followed); RemoveError naming
        it if it cannot be (a directory of that name)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise RemoveError.of(exc, self / name) from exc

    def _write(self, name: str, data: bytes) -> Path:
        """WriteError naming ``name`` when it cannot be written."""
        try:
            for _ in range(REOPENS):
                try:
                    replace_at(self.fd, name, data, REPORT_MODE)
                    return self / name
                except FileNotFoundError:
                    # No file can be made in a removed directory (ENOENT): one that another command
                    # made for the same new DIR and removed, empty, as it stopped (the module's doc).
                    self._reopen()
            replace_at(self.fd, name, data, REPORT_MODE)
        except OSError as exc:
            raise WriteError.of(exc, self / name) from exc
        return self / name

    def _reopen(self) -> None:
        again = OutputDir.open(self.path)
        os.close(self.fd)
        self.fd = again.fd
        self.made.extend(again.made)  # this one's now: removed on its close if left empty

    def close(self) -> None:
        """Close the directory, and remove those made for it that are still empty."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        _unmake(self.made)

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def png_of(figure: Figure) -> bytes:
    """``figure`` drawn as PNG, in memory: a page can be drawn in full before any file is touched."""
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    return png.getvalue()


def _unmake(made: list[Made]) -> None:
    """Remove the directories of ``made`` still empty, the last made first, and empty the list.
    Never by path: an rmdir of the name in the parent walked, which leaves a link, a file or a
    directory with anything in it. Whoever may swap another empty directory in at that name may
    remove it themselves."""
    while made:
        parent, name = made.pop()
        with contextlib.suppress(OSError):  # not empty, not a directory, gone: kept
            os.rmdir(name, dir_fd=parent)
        os.close(parent)


def _walk(path: Path, made: list[Made]) -> int:
    """An O_PATH descriptor of the directory at ``path``, resolved component by component; the
    directories made on the way are added to ``made``."""
    shown = Path("/" if path.is_absolute() else ".")
    pending = list(path.parts[1:] if path.is_absolute() else path.parts)
    at = os.open(shown, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            here = shown / name
            entry = _entry(at, name, here, made)
            st = os.fstat(entry)
            if stat.S_ISDIR(st.st_mode):
                os.close(at)
                at, shown = entry, here
                continue
            try:
                target = _link_target(entry, st, here)
            finally:
                os.close(entry)
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(here))
            if target.is_absolute():  # from / again; a relative target goes on from the link's directory
                os.close(at)
                at, shown = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), Path("/")
            pending[:0] = target.parts[1:] if target.is_absolute() else target.parts
    except BaseException:
        os.close(at)
        raise
    return at


def _entry(at: int, name: str, shown: Path, made: list[Made]) -> int:
    """The entry ``name`` in the directory ``at`` (O_PATH, a link not followed), made a directory
    if missing (and added to ``made``)."""
    try:
        try:
            return os.open(name, _LOOK, dir_fd=at)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):  # made meanwhile: looked at like any entry
                os.mkdir(name, 0o777, dir_fd=at)  # as Path.mkdir: the umask decides
                made.append(Made(os.dup(at), name))
            return os.open(name, _LOOK, dir_fd=at)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(shown)) from None


def _link_target(entry: int, st: os.stat_result, shown: Path) -> Path:
    """Where the link open at ``entry`` points, if the caller or root owns it."""
    if not stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(shown))
    if st.st_uid not in (0, os.geteuid()):
        raise ForeignLink(shown, st.st_uid)
    return Path(os.readlink("", dir_fd=entry))  # the inode just checked, not the name again
