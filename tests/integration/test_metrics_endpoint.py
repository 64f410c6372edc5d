"""The Prometheus endpoints of real `harp serve` and `harp guard` processes under idle connections.

Before, each was prometheus_client's start_http_server: a thread per connection for as long as it
stayed open. 2,000 idle connections made 2,012 threads in the daemon and 52 MB more memory, never
given back. Then 16 connection threads: idle connections held them all and scrapes were refused."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from slurm_harp.server.metrics_http import HEAD_TIMEOUT_S, MAX_CONNECTIONS
from tests.integration.test_prometheus import a_guard_without_slurmctld, free_port
from tests.integration.test_serve_process import serving, wait_serving
from tests.unit.test_metrics_http_bounds import closed

IDLE = 300


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def wait_scrape(port: int, within: float = 30) -> str:
    deadline = time.monotonic() + within
    while True:
        try:
            return scrape(port)
        except OSError:
            assert time.monotonic() < deadline, "the endpoint never answered"
            time.sleep(0.1)


@contextlib.contextmanager
def idle_connections(port: int) -> Iterator[list[socket.socket]]:
    """IDLE connections that each sent a byte and nothing more."""
    conns: list[socket.socket] = []
    try:
        for _ in range(IDLE):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conns.append(conn)
            with contextlib.suppress(OSError):  # one refused at once may be reset already
                conn.send(b"G")
        yield conns
    finally:
        for conn in conns:
            conn.close()


def check_bounded(pid: int, port: int, answers: str) -> None:
    """Idle connections take no thread; all but the last MAX_CONNECTIONS are closed at once, those
    within HEAD_TIMEOUT_S; scrapes are answered all the while."""
    before = threads(pid)
    with idle_connections(port) as conns:
        assert answers in scrape(port)
        assert threads(pid) <= before
        time.sleep(0.5)
        assert sum(closed(conn, 0.01) for conn in conns) >= IDLE - MAX_CONNECTIONS, "made room"
        time.sleep(HEAD_TIMEOUT_S + 0.5)
        assert all(closed(conn) for conn in conns), "idle connections are closed after the timeout"
        assert threads(pid) <= before
        assert answers in scrape(port)


def test_idle_connections_to_the_daemons_metrics_cost_bounded_threads(
    tmp_path: Path, trained_store: Path
) -> None:
    sock, port = tmp_path / "harp.sock", free_port()
    conf = tmp_path / "harp.toml"
    conf.write_text(
        f'[server]\nsocket = "{sock}"\nmetrics_port = {port}\nstore_poll_seconds = 3600\n'
        f'[store]\npath = "{trained_store}"\n'
    )
    with serving(conf) as proc:
        client = wait_serving(sock, proc)
        assert "harp_model_info" in wait_scrape(port)
        check_bounded(proc.pid, port, "harp_model_info")
        assert client.predict(time_limit_minutes=600).mode  # served throughout
        client.close()


def test_idle_connections_to_the_guards_metrics_cost_bounded_threads(tmp_path: Path) -> None:
    port = free_port()
    guard = a_guard_without_slurmctld(tmp_path, port)
    try:
        assert "harp_guard_polls_total" in wait_scrape(port)
        check_bounded(guard.pid, port, "harp_guard_polls_total")
    finally:
        guard.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            guard.wait(timeout=20)
        if guard.poll() is None:
            guard.kill()
            guard.wait()
