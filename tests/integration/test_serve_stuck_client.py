"""`harp serve` with a client on its socket that sends Predict calls and never reads the answers.

grpcio's ``server.stop(grace)`` completes only once every connection has taken what was written to
it, so such a client held the daemon's stop for as long as it kept its connection open: SIGTERM was
not acted on (systemd waited for TimeoutStopSec, then SIGKILL), and a removed socket was never
bound again while the process lived on, so Restart=always never fired. The daemon now waits
``grace_seconds`` and STOP_MARGIN_S more, then logs it and exits: at once on SIGTERM, and non-zero
when the socket was removed (a restart binds it again). In the Predict lane as in the worker pool.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.server.listeners import STOP_MARGIN_S
from tests.integration.h2_peer import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PREFACE,
    SETTINGS,
    frame,
    lit,
    message,
)
from tests.integration.test_serve_process import StderrLines, serving, wait_serving

pytestmark = pytest.mark.alone  # times itself against the wall clock (scripts/test)

GRACE_S = 0.5
# Calls whose answers cannot be sent: with a flow-control window of 0, 300 on one connection held
# the stop in the audit (the plugin's one call at a time on a connection never does).
UNREAD_CALLS = 300
# SETTINGS_INITIAL_WINDOW_SIZE (0x4) of 0: the server may send no DATA on any stream of ours.
NO_WINDOW = struct.pack(">HI", 0x4, 0)
PREDICT_HEADERS = b"".join(
    lit(name, value)
    for name, value in (
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/harp.v1.Predictor/Predict"),
        (":authority", "harp"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    )
)


def stuck_client(sock: Path) -> socket.socket:
    """A connection that sent UNREAD_CALLS Predict calls and will read none of their answers."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(str(sock))
    body = message(pb.SubmitRequest(user_name="alice", time_limit_minutes=600).SerializeToString())
    out = PREFACE + frame(SETTINGS, 0, 0, NO_WINDOW) + frame(SETTINGS, 1, 0)  # ours, and an ACK of theirs
    for i in range(UNREAD_CALLS):
        out += frame(HEADERS, END_HEADERS, 2 * i + 1, PREDICT_HEADERS) + frame(
            DATA, END_STREAM, 2 * i + 1, body
        )
    conn.sendall(out)
    return conn


def write_conf(tmp_path: Path, store: Path, lane: bool = True) -> Path:
    """A harp.toml of a short grace whose loop checks the socket every second."""
    path = tmp_path / "harp.toml"
    path.write_text(
        f'[server]\nsocket = "{tmp_path / "harp.sock"}"\ngrace_seconds = {GRACE_S}\n'
        f"predict_lane = {str(lane).lower()}\nstore_poll_seconds = 1\n"
        f'[store]\npath = "{store}"\n[policy]\nmode = "shadow"\n'
    )
    return path


@contextlib.contextmanager
def held(sock: Path) -> Iterator[socket.socket]:
    """A stuck client for the block, given time to be read by the daemon; closed after it."""
    conn = stuck_client(sock)
    try:
        time.sleep(0.5)  # its calls taken in and answered, the answers written to no window
        yield conn
    finally:
        conn.close()


# What the daemon is given before it must be gone: the grace, the margin, and the time to exit.
BOUND_S = GRACE_S + STOP_MARGIN_S + 3.0


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "pool"])
def test_sigterm_ends_the_daemon_within_its_bound_whatever_a_client_does_not_read(
    tmp_path: Path, trained_store: Path, lane: bool
) -> None:
    sock = tmp_path / "harp.sock"
    with serving(write_conf(tmp_path, trained_store, lane)) as proc:
        stderr = StderrLines(proc)
        wait_serving(sock, proc).close()
        with held(sock):
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            code = proc.wait(timeout=BOUND_S)
            took = time.monotonic() - sent
        assert code == 0, "".join(stderr.lines)
    assert took >= GRACE_S + STOP_MARGIN_S - 0.5, took  # the client did hold the stop
    stderr.wait_for(f"the server on unix:{sock} did not stop within")
    assert not sock.exists()


def test_a_removed_socket_a_client_holds_ends_the_daemon_non_zero_for_a_restart(
    tmp_path: Path, trained_store: Path
) -> None:
    """In the lane (the default); the wait that ends it is the same in the pool."""
    sock = tmp_path / "harp.sock"
    with serving(write_conf(tmp_path, trained_store)) as proc:
        stderr = StderrLines(proc)
        wait_serving(sock, proc).close()
        with held(sock):
            sock.unlink()
            code = proc.wait(timeout=1.0 + BOUND_S)  # the loop checks the socket every second
        assert code == 1, "".join(stderr.lines)
    stderr.wait_for(f"socket {sock} was removed, and the server that was on it did not stop within")
    assert "Traceback" not in "".join(stderr.lines)
