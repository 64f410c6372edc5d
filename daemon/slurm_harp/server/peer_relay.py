"""The advice socket: any user may connect, and the daemon knows who from the kernel.

grpcio cannot tell who is at the other end of a Unix socket: gRPC core never reads SO_PEERCRED
(grpc/grpc#15511, #28755: the auth context of a Unix-socket call is empty, even with local
credentials), and grpcio's Python server cannot be handed an accepted connection (C++ has
AddInsecureChannelFromFd; Python has only add_insecure_port). So the daemon accepts on the
advice socket itself, reads each connection's SO_PEERCRED (the uid, gid and pid the kernel
recorded when the client called connect()), and relays the connection's bytes unchanged to a
gRPC server listening in a directory only the daemon may enter. Before it connects there, each
relayed connection is bound to an abstract socket address holding a random token; gRPC reports
that address as the call's peer (``context.peer()`` is ``unix-abstract:<PREFIX><token>``), and
the token maps to the credentials read at accept. The client speaks plain gRPC to the advice
socket; its identity comes from the kernel, never from what it sends.

Bounds: at most ``max_connections`` open connections, a quarter of them (at least one) per uid,
and when all are taken a uid holding fewer than another takes that one's longest-idle connection
(relay_slots: no group of uids can keep another out); a connection idle ``idle_seconds`` is closed
(a gRPC client reconnects when it next calls).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_harp.server.relay_slots import Relayed, Slots
from slurm_harp.server.socket_path import RELAY_DIR_PREFIX, RELAY_SOCKET

log = logging.getLogger(__name__)

PREFIX = "slurm-harp-advice-"
_PEER = "unix-abstract:" + PREFIX
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_CHUNK = 65536
_ACCEPT_POLL_S = 0.5
_FULL_LOG_S = 60.0  # how often a full relay says so


@dataclass(frozen=True, slots=True)
class Peer:
    """Who connected, as the kernel recorded it at connect()."""

    uid: int
    gid: int
    pid: int


def peer_credentials(sock: socket.socket) -> Peer:
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return Peer(uid=uid, gid=gid, pid=pid)


class PeerRelay:
    """Accepts on ``public`` (mode ``mode``), relays to the gRPC server at ``inner``."""

    def __init__(
        self, public: Path, *, max_connections: int = 64, idle_seconds: float = 300.0, mode: int = 0o666
    ) -> None:
        self.public = public
        self.mode = mode
        self.max_connections = max_connections
        self.per_user = max(1, max_connections // 4)
        self._slots = Slots(max_connections, self.per_user)
        self.idle_seconds = idle_seconds
        self._private: Path | None = None
        self._listener: socket.socket | None = None
        self._socket_id = (0, 0)
        self._taken_over = False
        self._peers: dict[str, Peer] = {}
        self._open: dict[str, Relayed] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._refused = 0
        self._reclaimed = 0
        self._full_logged = 0.0

    @property
    def inner(self) -> Path:
        """Where the gRPC server must listen: inside a directory only this process's user enters."""
        if self._private is None:
            # Beside the public socket: systemd's ProtectSystem leaves the runtime directory writable.
            self._private = Path(tempfile.mkdtemp(prefix=RELAY_DIR_PREFIX, dir=self.public.parent))
            os.chmod(self._private, 0o700)
        return self._private / RELAY_SOCKET

    def peer(self, grpc_peer: str) -> Peer | None:
        """The credentials of the connection a call came on (``context.peer()``); None for a
        connection that did not come through this relay."""
        if not grpc_peer.startswith(_PEER):
            return None
        with self._lock:
            return self._peers.get(grpc_peer[len(_PEER) :])

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._slots)

    def start(self) -> None:
        """Bind the public socket (the caller has claimed the path) and accept in a thread."""
        self.public.parent.mkdir(parents=True, exist_ok=True)
        self._listener = self._bind()
        self._thread = threading.Thread(target=self._accept_loop, name="harp-advice-accept", daemon=True)
        self._thread.start()

    def _bind(self) -> socket.socket:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = False
        try:
            listener.bind(str(self.public))
            bound = True
            os.chmod(self.public, self.mode)
            listener.listen(64)
            listener.settimeout(_ACCEPT_POLL_S)
        except BaseException:
            listener.close()
            if bound:  # no one else's: the directory is the daemon's alone (socket_path)
                with contextlib.suppress(OSError):
                    self.public.unlink()
            raise
        st = self.public.lstat()
        self._socket_id = (st.st_dev, st.st_ino)
        return listener

    def check_socket(self) -> None:
        """Bind the public socket again if something removed it; leave a path taken over alone."""
        if self._listener is None:
            return
        try:
            st = self.public.lstat()
        except FileNotFoundError:
            log.warning("advice socket %s was removed; binding it again", self.public)
            try:
                fresh = self._bind()
            except OSError as exc:
                log.error("cannot bind %s again (next try in a few seconds): %s", self.public, exc)
                return
            old, self._listener = self._listener, fresh
            old.close()
            return
        taken = (st.st_dev, st.st_ino) != self._socket_id or not stat.S_ISSOCK(st.st_mode)
        if taken and not self._taken_over:
            log.error(
                "%s is no longer the advice socket; leaving it alone (restart to claim it)", self.public
            )
        self._taken_over = taken

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            listener = self._listener
            if listener is None:
                return
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if not self._stop.is_set():
                    time.sleep(0.05)  # a listener replaced by check_socket, or closed by stop
                continue
            try:
                self._admit(conn)
            except Exception:
                log.exception("advice connection dropped")
                conn.close()

    def _admit(self, conn: socket.socket) -> None:
        peer = peer_credentials(conn)
        relayed = Relayed(peer.uid, conn)
        token = secrets.token_hex(16)
        with self._lock:
            admitted, reclaimed = self._slots.take(relayed)
            if admitted:
                self._open[token] = relayed
                self._peers[token] = peer  # before the relayed connection exists: no call can miss it
        if not admitted:
            conn.close()
            self._refused += 1
            self._say_full(f"refused uid {peer.uid}")
            return
        # From here the slot and the token are taken: whatever fails (a pump thread that cannot
        # start at a thread limit, say) gives them back, or the slot was lost for good and the
        # other pump, if it started, waited on the barrier for ever.
        done = threading.Barrier(2, action=lambda: self._close(token, relayed))
        try:
            if reclaimed is not None:
                reclaimed.end()
                self._reclaimed += 1
                idle, uid = reclaimed.idle_s(), reclaimed.uid
                self._say_full(f"closed uid {uid}'s connection idle {idle:.0f} s for uid {peer.uid}")
            relayed.inner = inner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            inner.bind("\0" + PREFIX + token)
            inner.connect(str(self.inner))
            conn.settimeout(self.idle_seconds)
            for src, dst, name in ((conn, inner, "in"), (inner, conn, "out")):
                threading.Thread(
                    target=self._pump, args=(src, dst, relayed, done), name=f"harp-advice-{name}", daemon=True
                ).start()
        except BaseException:
            relayed.end()  # a pump already started wakes, and passes the broken barrier
            done.abort()
            self._close(token, relayed)
            raise

    def _say_full(self, what: str) -> None:
        now = time.monotonic()
        if now - self._full_logged >= _FULL_LOG_S:
            self._full_logged = now
            log.warning(
                "advice socket full (%d connections, %d per user): %s "
                "(so far %d refused, %d closed for another uid)",
                self.max_connections, self.per_user, what, self._refused, self._reclaimed,
            )  # fmt: skip

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, relayed: Relayed, done: threading.Barrier) -> None:
        """Copy ``src`` to ``dst`` until either side ends; then end both (a gRPC client never
        half-closes), so the other direction's pump wakes and ends too."""
        try:
            while data := src.recv(_CHUNK):
                relayed.active = time.monotonic()  # the longest idle is the first reclaimed
                dst.sendall(data)
        except OSError:  # idle timeout, reset, the other pump ended both, or reclaimed
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(threading.BrokenBarrierError):
            done.wait()

    def _close(self, token: str, relayed: Relayed) -> None:
        with self._lock:
            self._open.pop(token, None)
            self._peers.pop(token, None)
            self._slots.give_back(relayed)  # nothing if reclaimed: its slot went then
        for sock in (relayed.conn, relayed.inner):
            if sock is not None:
                sock.close()

    def stop(self) -> None:
        """Stop accepting, end every relayed connection, remove the public socket (if still
        ours) and the private directory."""
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            open_now = list(self._open.values())
        for relayed in open_now:
            relayed.end()
        if self._listener is not None:
            with contextlib.suppress(FileNotFoundError):
                st = self.public.lstat()
                if (st.st_dev, st.st_ino) == self._socket_id:
                    self.public.unlink()
        self._listener = None
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None
