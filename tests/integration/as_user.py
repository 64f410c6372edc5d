"""Speak gRPC as another user without running Python as that user.

The kernel records a Unix socket client's credentials when it calls connect() (SO_PEERCRED), not
when it sends. So a forked child that only drops to ``uid`` and connects, then hands the connected
socket back over SCM_RIGHTS, gives the test a connection the daemon sees as ``uid``'s; a one-shot
local relay lets an ordinary gRPC channel use it. (The test's Python need not be readable by that
user, as a pyenv under /root is not.) Root only.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc


def connect_as(uid: int, path: Path, gid: int | None = None) -> socket.socket:
    """A Unix socket connected to ``path`` by a process running as ``uid`` (OSError: it could not)."""
    if gid is None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = uid
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the child: syscalls only, then _exit (the parent has threads: no locks here)
        code = 1
        try:
            ours.close()
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(path))
            socket.send_fds(theirs, [b"ok"], [client.fileno()])
            code = 0
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                theirs.sendall(f"{type(exc).__name__}: {exc}".encode()[:1000])
        finally:
            os._exit(code)
    theirs.close()
    try:
        message, fds, _, _ = socket.recv_fds(ours, 1024, 1)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    if not fds:
        raise OSError(f"connect as uid {uid} to {path}: {message.decode(errors='replace')}")
    return socket.socket(fileno=fds[0])


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for sock in (src, dst):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def channel_as(uid: int, path: Path) -> Iterator[grpc.Channel]:
    """A gRPC channel whose one connection to ``path`` was made by ``uid``."""
    upstream = connect_as(uid, path)
    local = Path(tempfile.mkdtemp(prefix="harp-as-")) / "s"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(local))
    listener.listen(1)

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()  # one connection: the one made as uid
            listener.close()
            threading.Thread(target=_pump, args=(upstream, conn), daemon=True).start()
            _pump(conn, upstream)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    channel = grpc.insecure_channel(f"unix:{local}")
    try:
        yield channel
    finally:
        channel.close()
        listener.close()
        # shutdown, not only close: a pump blocked in recv keeps a closed socket alive, unseen.
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_RDWR)
        upstream.close()
        thread.join(timeout=5)
        with contextlib.suppress(OSError):
            local.unlink()
            local.parent.rmdir()
