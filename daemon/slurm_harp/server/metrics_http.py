"""The Prometheus endpoint of `harp serve` and `harp guard`: the registry passed in, served over HTTP
by a server of harp's own, with bounds.

prometheus_client's start_http_server is a ThreadingHTTPServer: a thread for each connection, for as
long as the connection stays open, and no timeout: 2,000 idle connections made 2,012 threads in the
daemon. A pool of connection threads is no better: 16 clients that connect, send nothing and connect
again when closed kept all 16 busy, and every scrape was refused. So here ONE thread serves every
connection from a selectors loop, with non-blocking sockets:

- a connection has HEAD_TIMEOUT_S from its accept to send its request line and headers;
- at most MAX_CONNECTIONS are open: when full, the one that has waited longest without a whole
  request is closed to make room (a scrape sends its request at once, so idle ones go first);
  a connection whose request is whole is never closed so, and a new one is refused only when
  every open one is being answered;
- the answer is built in the loop (encoding the registry takes milliseconds) and written without
  blocking, within SEND_TIMEOUT_S counted from when it was built (a slow collector does not eat
  the client's time to read it).

It answers GET and HEAD on any path, as prometheus_client did: the text format, or OpenMetrics when
asked for, gzipped when accepted, ``name[]`` parameters restricting the series; 405 for another
method, 400 for a request target that does not parse. One request per connection
(``Connection: close``).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import logging
import re
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import (
    CONTENT_TYPE_PLAIN_0_0_4,
    choose_encoder,
    generate_latest,
    gzip_accepted,
)

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 64  # open at once; a scrape or two at a time is all there is
HEAD_TIMEOUT_S = 5.0  # from accept to a whole request: a scrape sends its own at once
SEND_TIMEOUT_S = 5.0  # from the answer built to its last byte written
HEAD_BYTES = 16384  # a request line and headers; Prometheus sends a few hundred bytes
_ACCEPT_BATCH = 16  # accepted per turn, so that heads already sent are read in between
_ACCEPT_PAUSE_S = 0.1  # accept() failing (out of descriptors): the listener rests, no spinning
_LOG_EVERY_S = 60.0  # a failing collector says so at most this often
_HEAD_END = re.compile(rb"\n\r?\n")  # CRLF CRLF, or bare LFs as some clients send


@dataclass(eq=False, slots=True)
class _Conn:
    sock: socket.socket
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the answer left to write, once the request is whole


class MetricsServer:
    """Serves ``registry`` on ``address``:``port`` from one thread of its own until close(). OSError
    (a socket.gaierror for a host that does not resolve) when the address cannot be bound."""

    def __init__(
        self,
        address: str,
        port: int,
        registry: CollectorRegistry,
        *,
        max_connections: int = MAX_CONNECTIONS,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:
        self.registry = registry
        self.max_connections = max_connections
        self.head_timeout_s = head_timeout_s
        self.send_timeout_s = send_timeout_s
        self.evicted = 0  # closed without a whole request, to make room
        self.refused = 0  # closed at once: every open one was being answered
        self._conns: dict[socket.socket, _Conn] = {}  # in the order accepted
        self._logged_at = -_LOG_EVERY_S
        self._paused_until: float | None = None
        self._stop = threading.Event()
        self._listener = _listen(address, port)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()  # close() wakes the loop through it
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="harp-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop at once: the listener and every open connection are closed."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join()
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception:  # a bug of the loop's own: said, and the next turn may do better
                self._log_failure("metrics: the server's loop failed")
                time.sleep(_ACCEPT_PAUSE_S)

    def _turn(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self._drop(conn)  # a request or an answer not through in time
        if self._paused_until is not None and now >= self._paused_until:
            self._paused_until = None
            self._selector.register(self._listener, selectors.EVENT_READ)
        wakes = [c.deadline for c in self._conns.values()]
        if self._paused_until is not None:
            wakes.append(self._paused_until)
        timeout = max(0.0, min(wakes) - now) if wakes else None
        for key, _ in self._selector.select(timeout):
            if key.fileobj is self._listener:
                self._accept()
            elif key.fileobj is self._wake_r:
                return
            else:
                self._ready(key.data)

    def _ready(self, conn: _Conn) -> None:
        if self._conns.get(conn.sock) is not conn:
            return  # closed earlier in this turn (to make room)
        if conn.out is None:
            self._read(conn)
        else:
            self._write(conn)

    def _accept(self) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                return
            except ConnectionAbortedError:
                continue
            except OSError:  # out of descriptors, say: rest rather than spin on a listener still ready
                self._selector.unregister(self._listener)
                self._paused_until = time.monotonic() + _ACCEPT_PAUSE_S
                return
            if len(self._conns) >= self.max_connections and not self._make_room():
                self.refused += 1
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, time.monotonic() + self.head_timeout_s)
            self._conns[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            self._read(conn)  # a scrape's request is often there already

    def _make_room(self) -> bool:
        """Close the connection that has waited longest without a whole request; False if none.
        Each is read first: a request that came since the last turn is answered, not closed."""
        for conn in [c for c in self._conns.values() if c.out is None]:
            self._read(conn)
            if self._conns.get(conn.sock) is not conn:
                return True  # it closed, or was answered at once: room all the same
            if conn.out is None:
                self.evicted += 1
                self._drop(conn)
                return True
        return False  # every one open is being answered

    def _read(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:  # reset by the client
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        conn.head += chunk
        end = _HEAD_END.search(conn.head)
        if end is None:
            if len(conn.head) > HEAD_BYTES:
                self._drop(conn)
            return
        conn.out = memoryview(self._answer(bytes(conn.head[: end.start()])))
        conn.deadline = time.monotonic() + self.send_timeout_s  # from the answer built
        self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)  # most answers go whole into the socket's buffer

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except BlockingIOError:
                return  # the client reads slowly: the next turn that it may write
            except OSError:  # reset by the client
                break
            conn.out = conn.out[sent:]
        else:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        del self._conns[conn.sock]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        conn.sock.close()

    def _answer(self, head: bytes) -> bytes:
        lines = [line.rstrip(b"\r") for line in head.split(b"\n")]
        parts = lines[0].split()
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().decode("latin-1")
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            return _response("405 Method Not Allowed", "text/plain", b"GET /metrics\n", [])
        try:  # the client's fault (`GET http://[::1`), not a collector's: kept out of their log slot
            names = parse_qs(urlsplit(parts[1].decode("latin-1")).query).get("name[]")
        except ValueError as exc:
            log.debug("metrics: a request target that does not parse: %s", exc)
            return _response("400 Bad Request", "text/plain", b"bad request target\n", [])
        try:
            encoder, content_type = choose_encoder(headers.get(b"accept", ""))
        except Exception:  # a version it cannot compare ("version=abc" is a TypeError): the text
            encoder, content_type = generate_latest, CONTENT_TYPE_PLAIN_0_0_4
        try:
            registry = self.registry
            if names:
                registry = registry.restricted_registry(names)  # type: ignore[assignment]
            body = encoder(registry)
        except Exception:  # a collector's bug: said (not at every scrape), and the next may do better
            self._log_failure("metrics: a scrape failed")
            return _response("500 Internal Server Error", "text/plain", b"collection failed\n", [])
        extra = []
        if gzip_accepted(headers.get(b"accept-encoding", "")):
            body = gzip.compress(body)
            extra.append("Content-Encoding: gzip")
        response = _response("200 OK", content_type, body, extra)
        return response[: response.index(b"\r\n\r\n") + 4] if parts[0] == b"HEAD" else response

    def _log_failure(self, what: str) -> None:
        """``what`` with its traceback, at most once every _LOG_EVERY_S (a scrape every few
        seconds would otherwise fill the log with one traceback)."""
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log.exception("%s (said at most once a minute)", what)


def bind_problem(section: str, address: str, port: int, exc: OSError) -> str:
    """What `harp serve` and `harp guard` say of a MetricsServer they could not start, naming the key
    at fault: ``metrics_address`` for a host that does not resolve, is not this machine's or is a
    link-local address without its interface (``fe80::1``: EINVAL), where it said metrics_port;
    ``metrics_port`` otherwise (in use, below 1024 for a user)."""
    at_address = isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EINVAL)
    key = f"{section}.{'metrics_address' if at_address else 'metrics_port'}"
    return f"{key}: cannot serve metrics on {address}:{port}: {exc.strerror or exc}"


def _listen(address: str, port: int) -> socket.socket:
    family, _, _, _, sockaddr = socket.getaddrinfo(
        address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart's TIME_WAIT
        listener.bind(sockaddr)
        listener.listen(64)
        listener.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


def _response(status: str, content_type: str, body: bytes, extra: list[str]) -> bytes:
    lines = [
        f"HTTP/1.1 {status}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
