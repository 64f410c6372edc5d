"""The Prometheus endpoint of `harp serve` and `harp guard`: the registry passed in, served over HTTP
by a server of harp's own, with bounds.

prometheus_client's start_http_server is a ThreadingHTTPServer: a thread for each connection, for as
long as the connection stays open, and no timeout. Any local user could open idle connections to it:
2,000 of them made 2,012 threads in the daemon and 52 MB more memory, never given back. Here a
connection has TIMEOUT_S in all to send its request and take its answer, and MAX_CONNECTIONS are
served at once: one past them is closed at once (Prometheus tries again at its next scrape).

It answers GET and HEAD on any path, as prometheus_client did: the text format, or OpenMetrics when
asked for, gzipped when accepted, ``name[]`` parameters restricting the series. One request per
connection (``Connection: close``).
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import socket
import threading
import time
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16  # a scrape or two at a time is all there is: Prometheus, a person's curl
TIMEOUT_S = 5.0  # a scrape's request and answer take milliseconds
HEAD_BYTES = 16384  # a request line and headers; Prometheus sends a few hundred bytes
_ACCEPT_POLL_S = 0.5


class MetricsServer:
    """Serves ``registry`` on ``address``:``port`` from threads of its own until close(). OSError
    (a socket.gaierror for a host that does not resolve) when the address cannot be bound."""

    def __init__(
        self,
        address: str,
        port: int,
        registry: CollectorRegistry,
        *,
        max_connections: int = MAX_CONNECTIONS,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.registry = registry
        self.timeout_s = timeout_s
        self._slots = threading.BoundedSemaphore(max_connections)
        self._listener = _listen(address, port)
        self.port: int = self._listener.getsockname()[1]
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="harp-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting; connections being answered end within their timeout."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() at once
        self._thread.join()
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:  # out of descriptors, say: the next one may do
                time.sleep(0.05)
                continue
            if not self._slots.acquire(blocking=False):
                self.refused += 1
                conn.close()
                continue
            try:
                threading.Thread(
                    target=self._serve, args=(conn,), name="harp-metrics-conn", daemon=True
                ).start()
            except RuntimeError:  # no thread to be had: refused as when full
                self._slots.release()
                conn.close()

    def _serve(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.timeout_s
        try:
            head = _read_head(conn, deadline)
            if head is not None:
                _send(conn, self._answer(head), deadline)
        except OSError:  # timed out, reset by the client
            pass
        except Exception:  # a collector's bug: the next scrape may do better
            log.exception("metrics: a scrape failed")
        finally:
            conn.close()
            self._slots.release()

    def _answer(self, head: bytes) -> bytes:
        line, _, rest = head.partition(b"\r\n")
        parts = line.split()
        headers = {}
        for field in rest.split(b"\r\n"):
            name, _, value = field.partition(b":")
            headers[name.strip().lower()] = value.strip().decode("latin-1")
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            return _response("405 Method Not Allowed", "text/plain", b"GET /metrics\n", [])
        registry = self.registry
        names = parse_qs(urlsplit(parts[1].decode("latin-1")).query).get("name[]")
        if names:
            registry = registry.restricted_registry(names)  # type: ignore[assignment]
        encoder, content_type = choose_encoder(headers.get(b"accept", ""))
        body = encoder(registry)
        extra = []
        if gzip_accepted(headers.get(b"accept-encoding", "")):
            body = gzip.compress(body)
            extra.append("Content-Encoding: gzip")
        response = _response("200 OK", content_type, body, extra)
        return response[: response.index(b"\r\n\r\n") + 4] if parts[0] == b"HEAD" else response


def _listen(address: str, port: int) -> socket.socket:
    family, _, _, _, sockaddr = socket.getaddrinfo(
        address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart's TIME_WAIT
        listener.bind(sockaddr)
        listener.listen(64)
        listener.settimeout(_ACCEPT_POLL_S)
    except BaseException:
        listener.close()
        raise
    return listener


def _read_head(conn: socket.socket, deadline: float) -> bytes | None:
    """The request line and headers, or None: the connection closed, or no whole head within
    HEAD_BYTES. TimeoutError past ``deadline`` (a client trickling bytes gets no more time)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_BYTES:
            return None
        conn.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
    return data


def _send(conn: socket.socket, response: bytes, deadline: float) -> None:
    conn.settimeout(max(0.001, deadline - time.monotonic()))  # for the whole sendall
    conn.sendall(response)
    conn.shutdown(socket.SHUT_WR)


def _response(status: str, content_type: str, body: bytes, extra: list[str]) -> bytes:
    lines = [
        f"HTTP/1.1 {status}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
