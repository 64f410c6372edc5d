"""The bounded Prometheus endpoint (server/metrics_http.py) speaks what a scrape needs, whatever the
request says: an Accept header it cannot read, bare LF line ends, a collector that fails."""

from __future__ import annotations

import gzip
import logging
import socket
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.registry import Collector

from slurm_harp.server.metrics_http import MetricsServer


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("harp_test_calls", "Calls.", registry=registry).inc(3)
    Gauge("harp_test_other", "Another.", registry=registry).set(1)
    return registry


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[MetricsServer]:
    server = MetricsServer("127.0.0.1", 0, registry, head_timeout_s=1.0, send_timeout_s=1.0)
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


@pytest.mark.parametrize(
    "accept", ["application/openmetrics-text;version=abc", "text/plain;version=x.y", "a;;;=,,"]
)
def test_an_accept_header_it_cannot_read_gets_the_text_format(
    server: MetricsServer, caplog: pytest.LogCaptureFixture, accept: str
) -> None:
    """Before, prometheus_client's choose_encoder raised TypeError on the version: an ERROR
    traceback in the daemon's log for every request (500 in 0.17 s), and no answer."""
    reply = ask(server, f"GET /metrics HTTP/1.1\r\nAccept: {accept}\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"Content-Type: text/plain; version=0.0.4" in reply
    assert b"harp_test_calls_total 3.0" in reply
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_request_with_bare_lf_line_ends_is_answered(server: MetricsServer) -> None:
    """Before, only CRLF CRLF ended a request: this one waited for the timeout, unanswered."""
    reply = ask(server, b"GET /metrics?name[]=harp_test_other HTTP/1.0\nAccept-Encoding: gzip\n\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Encoding: gzip" in head
    assert b"harp_test_other 1.0" in gzip.decompress(body)


class Failing(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("a collector's bug")


def test_a_failing_collector_is_a_500_said_once_a_minute(
    registry: CollectorRegistry, server: MetricsServer, caplog: pytest.LogCaptureFixture
) -> None:
    registry.register(Failing())
    for _ in range(5):
        assert ask(server, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500 ")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "a scrape failed" in errors[0].getMessage() and errors[0].exc_info
    assert ask(server, b"GET /metrics?name[]=harp_test_other HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200")


def test_a_request_target_that_does_not_parse_is_a_400_and_no_collectors_failure(
    registry: CollectorRegistry, server: MetricsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, urlsplit's ValueError was taken for a collector's: a 500, an ERROR traceback, and the
    once-a-minute slot spent, so that a collector failing right after was logged by nothing."""
    caplog.set_level(logging.DEBUG)
    assert ask(server, b"GET http://[::1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request")
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    registry.register(Failing())
    assert ask(server, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 500 ")
    (error,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "a scrape failed" in error.getMessage() and error.exc_info
