"""A daemon's Unix socket path: short enough to bind, in a directory no one else may write in, a
crashed run's socket taken over, a live daemon's refused. For the submission socket and the advice
socket (and its relay's socket beside it) alike."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from slurm_harp.config import ConfigError, Settings, check_host

RELAY_DIR_PREFIX = ".harp-advice-"  # the advice relay's private directory: this, then mkdtemp's 8 characters
RELAY_SOCKET = "grpc.sock"  # the gRPC server's socket in it (server.peer_relay)
# The longest path a Unix socket may be bound at: sun_path's 108 bytes less the final NUL. grpcio
# says only "Failed to bind" past it.
SUN_PATH_MAX = 107


def inner_socket(public: Path) -> Path:
    """The path of the gRPC server's socket behind ``public``, as long as it will be (the private
    directory's random part stands as X's): ``public``'s directory and 32 bytes."""
    return public.parent / f"{RELAY_DIR_PREFIX}XXXXXXXX" / RELAY_SOCKET


def path_problem(public: Path | None) -> str | None:
    """Why the relay cannot listen at ``public``, or None (also for no path): the path of its inner
    socket is past SUN_PATH_MAX bytes. `harp check-config`, `harp serve` and the relay ask this."""
    if public is None:
        return None
    inner = inner_socket(public)
    if (problem := length_problem(inner)) is None:
        return None
    return f"{public}: the relay's socket beside it ({inner}) would be {problem}"


def length_problem(sock: Path) -> str | None:
    """Why no Unix socket can be bound at ``sock`` for its length, or None."""
    size = len(os.fsencode(sock))
    if size <= SUN_PATH_MAX:
        return None
    return (
        f"a path of {size} bytes, over the {SUN_PATH_MAX} a Unix socket's may have: "
        f"choose a path {size - SUN_PATH_MAX} bytes shorter"
    )


class DaemonError(RuntimeError):
    """The daemon cannot start as configured: its socket is taken, or cannot be given its group and
    mode. The message names the problem."""


def start_problem(settings: Settings) -> str | None:
    """Why `harp serve` would not start with ``settings`` on this host, or None: a socket group the
    host lacks, a socket path too long to bind, an advice socket too long for the relay's beside it.
    `harp check-config`, `harp serve` before it binds and a reload (which keeps the running file)
    all ask this one question."""
    try:
        check_host(settings)
    except ConfigError as exc:
        return str(exc)
    where = settings.source or "<config>"
    for key, sock in (("server.socket", settings.server.socket), ("advice.socket", settings.advice.socket)):
        # grpcio says only "Failed to bind", and after the socket's directory is made
        if sock is not None and (problem := length_problem(sock)) is not None:
            return f"{where}: {key}: {sock} is {problem}"
    if (problem := path_problem(settings.advice.socket)) is not None:
        return f"{where}: advice.socket: {problem}"
    return None


@contextlib.contextmanager
def umask_at_least(bits: int) -> Iterator[None]:
    """Add ``bits`` to the process's umask for the block (it is the process's: files other threads
    create meanwhile are made no more open than they would be)."""
    old = os.umask(0o077)
    os.umask(old | bits)
    try:
        yield
    finally:
        os.umask(old)


def make_socket_dir(directory: Path) -> list[Path]:
    """``mkdir -p`` with no directory writable by group or others, whatever the umask (0 in a
    shell that set it: a world-writable directory lets anyone put a server of their own at the
    socket's path); then check_socket_dir, for a directory that was there already. Returns the
    directories it made, deepest first, for remove_socket_dirs should the start fail. DaemonError
    when it cannot be made (a file on its path, a read-only file system, no permission)."""
    missing = [d for d in (directory, *directory.parents) if not os.path.lexists(d)]
    try:
        with umask_at_least(0o022):
            directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # mkdir's errno says "File exists"
        raise DaemonError(f"socket directory {directory}: cannot make it: a file on its path") from None
    except OSError as exc:
        remove_socket_dirs(missing)  # the ones above a read-only or full one may have been made
        raise DaemonError(f"socket directory {directory}: cannot make it: {exc.strerror or exc}") from None
    try:
        check_socket_dir(directory)
    except DaemonError:
        remove_socket_dirs(missing)
        raise
    return missing


def remove_socket_dirs(made: list[Path]) -> None:
    """Remove the directories make_socket_dir made, deepest first, while they are empty: a start
    that failed leaves none behind (under Restart=always, at every start). One not empty (a file
    put there meanwhile) is kept, and the ones above it."""
    for directory in made:
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def check_socket_dir(directory: Path) -> None:
    """Raise DaemonError unless no one but root and this process's user can replace what is in
    ``directory``: it and every directory above it must be owned by root or this uid and writable
    by no one else unless sticky. Otherwise another user could rename the socket away and serve at
    its path (or swap a directory on the way for one of their own). A link on the way (``/var/run``
    to ``/run``) is one when it is root's or ours, and where it leads must pass the same check."""
    _check_dirs(Path(os.path.abspath(directory)), directory)


def _check_dirs(path: Path, directory: Path) -> None:
    """check_socket_dir of ``path``, the configured ``directory`` or where a link on it leads."""
    me = os.geteuid()
    for part in (path, *path.parents):
        try:
            st = part.lstat()
        except OSError as exc:
            raise DaemonError(f"socket directory {directory}: cannot check {part}: {exc}") from None
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (0, me):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a directory"
            problem = f"{kind} owned by uid {st.st_uid}, neither root nor this daemon's user (uid {me})"
        elif stat.S_ISLNK(st.st_mode):
            _check_dirs(part.resolve(), directory)
            continue
        elif not stat.S_ISDIR(st.st_mode):
            problem = "not a directory"
        elif mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            problem = f"writable by group or others (mode {mode:04o}) and not sticky"
        else:
            continue
        where = "" if part == Path(os.path.abspath(directory)) else f": {part}"
        raise DaemonError(
            f"socket directory {directory}{where} is {problem}: another user could replace the "
            "socket; refusing to serve there"
        )


def secure_socket(sock: Path, gid: int | None, mode: int) -> tuple[int, int]:
    """Give the socket just bound at ``sock`` its group and mode, following no link, and return
    its (st_dev, st_ino). DaemonError when the path is no longer a socket of this uid (grpcio
    gives no descriptor to fchmod; check_socket_dir leaves no one else able to swap it between
    the check and the chmod). OSError when the group or mode cannot be set."""
    if gid is not None:
        os.chown(sock, -1, gid, follow_symlinks=False)
    st = sock.lstat()
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
        raise DaemonError(f"{sock} is no longer the socket this daemon bound; not changing its mode")
    os.chmod(sock, mode)
    return st.st_dev, st.st_ino


def claim_socket(sock: Path) -> None:
    """Remove a stale socket left by a crashed run; refuse one that a live daemon answers on (a
    second `harp serve` must not take over the first one's clients) and anything not a socket."""
    try:
        st = sock.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:  # its directory not searchable by this user
        raise DaemonError(f"{sock}: cannot check what is there ({exc.strerror or exc})") from None
    if not (stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise DaemonError(f"{sock} exists and is not a socket; not removing it")
    try:
        live = listening(sock)
    except OSError as exc:
        raise DaemonError(
            f"{sock}: cannot tell whether a daemon serves on it ({exc}); not removing it"
        ) from None
    if not live:
        _remove_stale(sock)  # nobody listens: a crashed run's socket, or a dangling link
        return
    raise DaemonError(f"another daemon is serving on {sock}; stop it first (systemctl stop slurm-harp)")


def listening(sock: Path) -> bool:
    """Whether a process accepts connections on the Unix socket ``sock``: False when nobody listens
    there (refused, or no such path); OSError when it cannot tell (a timeout, no permission)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(sock))
    except (ConnectionRefusedError, FileNotFoundError, NotADirectoryError):
        return False
    finally:
        probe.close()
    return True


def _remove_stale(sock: Path) -> None:
    """Unlink a socket or link nobody answers on; DaemonError when this user may not (another
    user's, in a sticky directory such as /tmp: that was a traceback at start)."""
    try:
        sock.unlink()
    except FileNotFoundError:
        pass  # removed meanwhile
    except OSError as exc:
        raise DaemonError(
            f"{sock} is a stale socket or link nobody serves on, and this daemon cannot remove it "
            f"({exc.strerror or exc}): remove it, or choose another path"
        ) from None
