"""The plugin's Lua gRPC client keeps to a call's deadline, and a timed-out call costs no more.

Against a slow grpcio handler (the timed-out connection is dropped, the next call works), a scripted
HTTP/2 peer that reads the request and never answers, and a listener that never accepts.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import grpc

from tests.integration.conformance_service import call
from tests.integration.h2_peer import PeerConn
from tests.integration.lua_driver import SLACK_MS, Driver, lua_or_skip

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing


def test_deadline_exceeded_against_a_slow_handler(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "Sleep", "0.3", deadline_ms=50)
    assert not out["ok"] and out["err"] == "deadline exceeded", out
    assert 45 <= out["ms"] < 50 + SLACK_MS, out
    assert out["connected"] is False, "a timed-out connection is dropped"
    assert call(driver, "Echo", "x")["ok"]


def test_silent_server_costs_the_deadline_and_no_more(peer_at: Any, driver: Driver) -> None:
    def script(pc: PeerConn) -> None:
        pc.start()
        pc.read_request()
        time.sleep(1)

    peer_at(script)
    out = call(driver, "Echo", "x", deadline_ms=50)
    assert out["err"] == "deadline exceeded", out
    assert 45 <= out["ms"] < 50 + SLACK_MS, out


def test_listener_that_never_accepts_costs_the_deadline(tmp_path: Path) -> None:
    path = tmp_path / "backlog.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)  # connect succeeds (backlog); nobody ever reads or answers
    drv = Driver(path)
    try:
        out = call(drv, "/conf.Test/Echo", "x", deadline_ms=50)
        assert out["err"] == "deadline exceeded" and out["ms"] < 50 + SLACK_MS, out
    finally:
        drv.close()
        listener.close()
