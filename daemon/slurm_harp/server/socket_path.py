"""A daemon's Unix socket path: a directory no one else may write in, a crashed run's socket
taken over, a live daemon's refused. For the submission socket and the advice socket alike."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path


class DaemonError(RuntimeError):
    """The daemon cannot start as configured: its socket is taken, or cannot be given its group and
    mode. The message names the problem."""


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


def make_socket_dir(directory: Path) -> None:
    """``mkdir -p`` with no directory writable by group or others, whatever the umask (0 in a
    shell that set it: a world-writable directory lets anyone put a server of their own at the
    socket's path)."""
    with umask_at_least(0o022):
        directory.mkdir(parents=True, exist_ok=True)


def claim_socket(sock: Path) -> None:
    """Remove a stale socket left by a crashed run; refuse one that a live daemon answers on (a
    second `harp serve` must not take over the first one's clients) and anything not a socket."""
    try:
        st = sock.lstat()
    except FileNotFoundError:
        return
    if not (stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise DaemonError(f"{sock} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(sock))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.unlink()  # nobody listens: a crashed run's socket, or a dangling link
        return
    except OSError as exc:
        raise DaemonError(
            f"{sock}: cannot tell whether a daemon serves on it ({exc}); not removing it"
        ) from None
    finally:
        probe.close()
    raise DaemonError(f"another daemon is serving on {sock}; stop it first (systemctl stop slurm-harp)")
