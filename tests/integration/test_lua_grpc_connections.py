"""Connection life in the plugin's Lua gRPC client: GOAWAY, restarts, resets, SIGPIPE.

Against grpcio (in its worker pool and in core lanes): a graceful stop mid-call finishes the call,
restarts reconnect (with and without the precheck), and SIGPIPE cannot kill the host. Against a
scripted HTTP/2 peer: a GOAWAY refusing the stream is retried on a fresh connection, a GOAWAY while
idle means a new connection without a retry, a REFUSED_STREAM on a fresh connection is not retried.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conformance_service import Recorder, call, start_conformance_server
from tests.integration.h2_peer import GOAWAY, RST_STREAM, PeerConn, frame, serve_forever
from tests.integration.lua_driver import Driver, lua_or_skip

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing

# --- a real grpcio server ------------------------------------------------------------------------------


def test_graceful_stop_finishes_the_call_in_flight(sock: Path, rec: Recorder, lane: bool) -> None:
    srv = start_conformance_server(sock, rec, lane)
    drv = Driver(sock)
    try:
        assert call(drv, "Echo", "x")["ok"]
        stopped: list[threading.Event] = []
        timer = threading.Timer(0.1, lambda: stopped.append(srv.stop(grace=5)))  # GOAWAY mid-call
        timer.start()
        out = call(drv, "Sleep", "0.4", deadline_ms=3000)
        timer.join()
        assert out["ok"], out
        stopped[0].wait(5)
        srv = start_conformance_server(sock, rec, lane)
        again = call(drv, "Echo", "x")
        assert again["ok"], again
        assert again["stats"]["connects"] == 2 and again["stats"]["retries"] == 0, again
    finally:
        drv.close()
        srv.stop(0).wait()


@pytest.mark.parametrize("precheck", [True, False])
def test_restart_reconnects(sock: Path, rec: Recorder, lane: bool, precheck: bool) -> None:
    srv = start_conformance_server(sock, rec, lane)
    drv = Driver(sock)
    try:
        drv("set", precheck=precheck)
        for restart in range(3):
            assert call(drv, "Echo", "x")["ok"]
            srv.stop(grace=None if restart % 2 else 1).wait()  # GOAWAY then EOF, or just EOF
            srv = start_conformance_server(sock, rec, lane)
        out = call(drv, "Echo", "x")
        assert out["ok"] and out["stats"]["connects"] == 4, out
        assert out["stats"]["retries"] == (0 if precheck else 3), out
    finally:
        drv.close()
        srv.stop(0).wait()


def test_sigpipe_does_not_kill_the_host(sock: Path, rec: Recorder) -> None:
    drv = Driver(sock)
    try:
        assert drv("set")["sigpipe"] in ("blocked", "ignored", "ignored by harp.sigpipe")
    finally:
        drv.close()


# --- a scripted HTTP/2 peer ----------------------------------------------------------------------------


def test_goaway_refusing_the_stream_is_retried_on_a_fresh_connection(peer_at: Any, driver: Driver) -> None:
    def handle(pc: PeerConn, sid: int, n: int) -> None:
        if pc.index == 0 and n == 1:  # the second request on the first connection: not processed
            pc.send(frame(GOAWAY, 0, 0, struct.pack(">II", sid - 2, 0) + b"restarting"))
            pc.conn.close()
            raise EOFError
        pc.respond(sid)

    peer_at(serve_forever(handle))
    assert call(driver, "Echo", "x")["ok"]
    out = call(driver, "Echo", "x")
    assert out["ok"], out
    assert out["stats"]["retries"] == 1 and out["stats"]["connects"] == 2, out


def test_goaway_while_idle_means_a_new_connection_without_retry(peer_at: Any, driver: Driver) -> None:
    def handle(pc: PeerConn, sid: int, n: int) -> None:
        pc.respond(sid)
        if pc.index == 0:
            pc.send(frame(GOAWAY, 0, 0, struct.pack(">II", sid, 0)))

    peer_at(serve_forever(handle))
    assert call(driver, "Echo", "x")["ok"]
    time.sleep(0.05)
    out = call(driver, "Echo", "x")
    assert out["ok"] and out["stats"]["retries"] == 0 and out["stats"]["connects"] == 2, out


def test_refused_stream_on_a_fresh_connection_is_not_retried(peer_at: Any, driver: Driver) -> None:
    peer_at(serve_forever(lambda pc, sid, n: pc.send(frame(RST_STREAM, 0, sid, struct.pack(">I", 7)))))
    out = call(driver, "Echo", "x")
    assert out["err"] == "stream reset by the server: REFUSED_STREAM", out
    assert out["stats"]["retries"] == 0
