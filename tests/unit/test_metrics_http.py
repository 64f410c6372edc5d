"""The bounded Prometheus endpoint (server/metrics_http.py) speaks what a scrape needs, and gives a
connection TIMEOUT_S in all, not per read."""

from __future__ import annotations

import contextlib
import gzip
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from slurm_harp.server.metrics_http import MetricsServer


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("harp_test_calls", "Calls.", registry=registry).inc(3)
    Gauge("harp_test_other", "Another.", registry=registry).set(1)
    server = MetricsServer("127.0.0.1", 0, registry, max_connections=2, timeout_s=1.0)
    try:
        yield server
    finally:
        server.close()


def ask(server: MetricsServer, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        conn.sendall(request)
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply


def test_a_scrape_gets_the_registry(server: MetricsServer) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    assert "harp_test_calls_total 3.0" in text and "harp_test_other 1.0" in text


def test_openmetrics_gzip_head_names_and_methods(server: MetricsServer) -> None:
    reply = ask(server, b"GET /metrics?name[]=harp_test_other HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"harp_test_other 1.0" in reply
    assert b"harp_test_calls" not in reply
    om = ask(server, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n")
    assert b"application/openmetrics-text" in om and om.endswith(b"# EOF\n")
    zipped = ask(server, b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
    head, _, body = zipped.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head and b"harp_test_calls_total 3.0" in gzip.decompress(body)
    head_only = ask(server, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert head_only.startswith(b"HTTP/1.1 200 OK") and head_only.endswith(b"\r\n\r\n")
    assert ask(server, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")


def test_a_client_trickling_its_request_is_closed_at_the_timeout(server: MetricsServer) -> None:
    """A byte every 0.2 s never trips a per-read timeout of 1 s: the deadline is the connection's."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
        started = time.monotonic()
        with pytest.raises(OSError):  # EPIPE or a reset, once the server has closed
            for byte in b"GET /metrics HTTP/1.1\r\n" + b"X" * 100:
                conn.send(bytes([byte]))
                time.sleep(0.2)
        assert time.monotonic() - started < 3


def test_past_max_connections_a_connection_is_closed_at_once(server: MetricsServer) -> None:
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
    try:
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as extra:
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):  # closed with the request unread
                assert extra.recv(1) == b""
            assert time.monotonic() - started < 0.5
        assert server.refused == 1
    finally:
        for conn in held:
            conn.close()
