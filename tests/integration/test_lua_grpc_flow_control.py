"""Flow control and large messages in the plugin's Lua gRPC client.

Against grpcio: a large response with the default window and with a small one of our own (stream and
connection WINDOW_UPDATEs), a large request following grpcio's windows, a response over MAX_RESPONSE,
many calls on one connection topping up its windows. Against a scripted HTTP/2 peer: a 16-byte
window pacing the request body.
"""

from __future__ import annotations

import struct
from typing import Any

import grpc
import pytest

from tests.integration.conformance_service import call, expect_pattern
from tests.integration.h2_peer import WINDOW_UPDATE, PeerConn, frame, message
from tests.integration.lua_driver import Driver, lua_or_skip

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing

# --- a real grpcio server ------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [None, 65535], ids=["default-window", "window-65535"])
def test_large_response(server: grpc.Server, driver: Driver, window: int | None) -> None:
    if window:
        driver("set", window=window)  # 512 KB then needs stream and connection WINDOW_UPDATEs
    out = call(driver, "Big", str(512 * 1024))
    expect_pattern(out, 512 * 1024)
    expect_pattern(call(driver, "Big", "100"), 100)
    assert out["stats"]["connects"] == 1


def test_large_request_follows_the_servers_windows(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "Echo", "abcdefgh", **{"repeat": 40000})  # 320 KB: past grpcio's first windows
    assert out["ok"] and out["size"] == 320000 and out["sum"] == sum(b"abcdefgh") * 40000, out


def test_response_over_max_response_is_refused(server: grpc.Server, driver: Driver) -> None:
    driver("set", max_response=100000)
    out = call(driver, "Big", "100001")
    assert not out["ok"] and "larger than" in out["err"], out
    assert out["connected"] is False and out["stats"]["retries"] == 0
    expect_pattern(call(driver, "Big", "100000"), 100000)


def test_many_calls_on_one_connection_top_up_the_windows(server: grpc.Server, driver: Driver) -> None:
    driver("set", window=65535)
    for _ in range(40):  # 320 KB of responses: five times the connection's window
        expect_pattern(call(driver, "Big", "8192"), 8192)
    out = call(driver, "Big", "8192")
    assert out["stats"]["connects"] == 1 and out["stats"]["retries"] == 0, out


# --- a scripted HTTP/2 peer ----------------------------------------------------------------------------


def test_small_peer_window_paces_the_request_body(peer_at: Any, driver: Driver) -> None:
    sizes: list[int] = []

    def script(pc: PeerConn) -> None:
        pc.start(settings=struct.pack(">HI", 4, 16) + struct.pack(">HI", 5, 16384))  # INITIAL_WINDOW_SIZE 16
        sid, _, _ = pc.read_request()  # sent before our SETTINGS reached the client
        pc.respond(sid)

        def give_back(sid: int, payload: bytes) -> None:
            sizes.append(len(payload))
            pc.send(frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", len(payload))))
            pc.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", len(payload))))

        sid, _, body = pc.read_request(on_data=give_back)
        assert body == message(b"0123456789" * 10)
        pc.respond(sid, b"paced")

    peer_at(script)
    assert call(driver, "Echo", "x")["ok"]
    out = call(driver, "Echo", "0123456789", **{"repeat": 10})
    assert out["ok"] and bytes.fromhex(out["head"]) == b"paced", out
    assert sizes and max(sizes) <= 16 and sum(sizes) == 105, sizes
