"""A scripted HTTP/2 peer breaking the protocol: the plugin's Lua gRPC client returns an error.

Every violation must come back as an error string soon (the plugin then fails open), with the
connection dropped and the Lua state intact, never as a Lua error or a wait for the deadline: an
HTTP/1.1 reply, an oversized frame, bad HPACK and Huffman, DATA before HEADERS, PUSH_PROMISE, a cut
header block, a header block over 4 KiB (or 64 empty CONTINUATIONs), malformed SETTINGS,
WINDOW_UPDATE and GOAWAY frames, a window overrun, a close mid-response, missing trailers or
grpc-status, HTTP 503, not gRPC, a compressed message, RST_STREAM, and a first frame that is not
SETTINGS.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.conformance_service import call
from tests.integration.h2_peer import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    OK_HEADERS,
    OK_TRAILERS,
    PING,
    PREFACE,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    PeerConn,
    frame,
    lit,
    message,
)
from tests.integration.lua_driver import Driver, lua_or_skip

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing

BAD_SERVERS: dict[str, tuple[Callable[[int], bytes], str]] = {
    # name: (what the server sends after reading the request, after its SETTINGS; expected error)
    "http/1.1 reply": (
        lambda sid: b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        "FRAME_SIZE_ERROR",
    ),
    "oversized frame": (lambda sid: frame(DATA, 0, sid, b"x" * 16385), "FRAME_SIZE_ERROR"),
    "unknown HPACK index": (lambda sid: frame(HEADERS, END_HEADERS, sid, b"\xbe"), "COMPRESSION_ERROR"),
    "truncated HPACK block": (
        lambda sid: frame(HEADERS, END_HEADERS, sid, b"\x00\x05ab"),
        "COMPRESSION_ERROR",
    ),
    "bad Huffman": (
        lambda sid: frame(HEADERS, END_HEADERS, sid, b"\x00\x01a\x82\xff\xff"),
        "COMPRESSION_ERROR",
    ),
    "DATA before HEADERS": (lambda sid: frame(DATA, 0, sid, message(b"x")), "PROTOCOL_ERROR"),
    "PUSH_PROMISE": (
        lambda sid: frame(PUSH_PROMISE, END_HEADERS, sid, struct.pack(">I", 2) + b"\x82"),
        "PUSH_PROMISE",
    ),
    "HEADERS on an unopened stream": (
        lambda sid: frame(HEADERS, END_HEADERS, sid + 2, OK_HEADERS),
        "PROTOCOL_ERROR",
    ),
    "CONTINUATION cut": (
        lambda sid: frame(HEADERS, 0, sid, OK_HEADERS[:1]) + frame(PING, 0, 0, b"x" * 8),
        "header block cut",
    ),
    "header block over 4 KiB": (  # 4,097 bytes: one more than the client decodes
        lambda sid: (
            frame(HEADERS, 0, sid, b"\x82" * 4000) + frame(CONTINUATION, END_HEADERS, sid, b"\x82" * 97)
        ),
        "header block over 4096 bytes",
    ),
    "a HEADERS frame over 4 KiB": (
        lambda sid: frame(HEADERS, END_HEADERS, sid, b"\x82" * 4097),
        "header block over 4096 bytes",
    ),
    "empty CONTINUATIONs without end": (  # each counts 64 bytes: they grew the parts to join for ever
        lambda sid: frame(HEADERS, 0, sid, b"\x82") + frame(CONTINUATION, 0, sid) * 100,
        "header block over 4096 bytes",
    ),
    "bad SETTINGS length": (lambda sid: frame(SETTINGS, 0, 0, b"\0\4\0\0\0"), "FRAME_SIZE_ERROR"),
    "WINDOW_UPDATE of 0": (lambda sid: frame(WINDOW_UPDATE, 0, 0, b"\0\0\0\0"), "WINDOW_UPDATE of 0"),
    "malformed GOAWAY": (lambda sid: frame(GOAWAY, 0, 0, b"\0\0"), "malformed GOAWAY"),
    "window overrun": (  # 2,000 bytes in one frame on a stream whose window is 1,000
        lambda sid: frame(HEADERS, END_HEADERS, sid, OK_HEADERS) + frame(DATA, 0, sid, b"x" * 2000),
        "FLOW_CONTROL_ERROR",
    ),
    "close mid-response": (lambda sid: frame(HEADERS, END_HEADERS, sid, OK_HEADERS), "connection closed"),
    "no trailers": (
        lambda sid: (
            frame(HEADERS, END_HEADERS, sid, OK_HEADERS) + frame(DATA, END_STREAM, sid, message(b"x"))
        ),
        "without trailers",
    ),
    "trailers without END_STREAM": (
        lambda sid: (
            frame(HEADERS, END_HEADERS, sid, OK_HEADERS) + frame(HEADERS, END_HEADERS, sid, OK_TRAILERS)
        ),
        "without END_STREAM",
    ),
    "HTTP 503": (
        lambda sid: frame(HEADERS, END_HEADERS | END_STREAM, sid, b"\x08\x03503"),
        "HTTP status 503",
    ),
    "not gRPC": (
        lambda sid: frame(HEADERS, END_HEADERS | END_STREAM, sid, b"\x88" + lit("content-type", "text/html")),
        "not gRPC",
    ),
    "no grpc-status": (
        lambda sid: (
            frame(HEADERS, END_HEADERS, sid, OK_HEADERS)
            + frame(DATA, 0, sid, message(b"x"))
            + frame(HEADERS, END_HEADERS | END_STREAM, sid, lit("x-other", "1"))
        ),
        "no grpc-status",
    ),
    "compressed message": (
        lambda sid: (
            frame(HEADERS, END_HEADERS, sid, OK_HEADERS)
            + frame(DATA, 0, sid, message(b"x", flag=1))
            + frame(HEADERS, END_HEADERS | END_STREAM, sid, OK_TRAILERS)
        ),
        "compressed",
    ),
    "RST_STREAM": (
        lambda sid: frame(RST_STREAM, 0, sid, struct.pack(">I", 2)),
        "reset by the server: INTERNAL_ERROR",
    ),
}


@pytest.mark.parametrize("name", list(BAD_SERVERS))
def test_protocol_violations_are_errors(peer_at: Any, driver: Driver, name: str) -> None:
    reply, expected = BAD_SERVERS[name]
    driver("set", window=1000)  # our stream window: see "window overrun"

    def script(pc: PeerConn) -> None:
        pc.start()
        sid, _, _ = pc.read_request()
        pc.send(reply(sid))
        time.sleep(0.05)
        pc.conn.close()

    peer_at(script)
    out = call(driver, "Echo", "x", deadline_ms=1000)
    assert not out["ok"] and expected in out["err"], out
    assert out["ms"] < 500, "an error, not a wait for the deadline"
    assert out["connected"] is False
    assert driver("set")["ok"], "the driver (the plugin's Lua state) survives"


def test_first_frame_must_be_settings(peer_at: Any, driver: Driver) -> None:
    def script(pc: PeerConn) -> None:
        assert pc._need(len(PREFACE)) == PREFACE
        pc.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, OK_HEADERS + OK_TRAILERS))

    peer_at(script)
    out = call(driver, "Echo", "x")
    assert not out["ok"] and "first frame is not SETTINGS" in out["err"], out
