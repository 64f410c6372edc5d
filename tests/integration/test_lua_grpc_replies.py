"""The plugin's Lua gRPC client on what a reply may be, and on the request it sends.

Against grpcio: an OK response with grpcio's headers, an empty message, error statuses in trailers
(after a message or without one) and in trailers-only responses (percent-decoded), UNIMPLEMENTED, two
messages for a unary call. Against a scripted HTTP/2 peer: the request headers, and replies framed as
grpcio never frames them (CONTINUATION, padding, PRIORITY and unknown frames, Huffman-coded values and
the dynamic table, a PING mid-response).
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from tests.integration.conformance_service import Recorder, call
from tests.integration.h2_peer import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    HUFFMAN_DATE,
    OK_HEADERS,
    OK_TRAILERS,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    SETTINGS,
    PeerConn,
    frame,
    lit,
    message,
    serve_forever,
)
from tests.integration.lua_driver import ROOMY_MS, Driver, lua_or_skip

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing

# --- a real grpcio server ------------------------------------------------------------------------------


def test_ok_response_with_headers_grpc_accepts(
    pool_server: grpc.Server, rec: Recorder, driver: Driver
) -> None:
    out = call(driver, "Sleep", "0")
    assert out["ok"] and bytes.fromhex(out["head"]) == b"slept", out
    (remaining,) = rec.time_remaining
    assert ROOMY_MS / 2000 < remaining <= ROOMY_MS / 1000 + 0.001, "grpc-timeout carries the call's deadline"
    assert rec.metadata[0]["user-agent"].startswith("slurm-harp-plugin"), rec.metadata


def test_empty_message_is_a_valid_response(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "Empty")
    assert out["ok"] and out["size"] == 0, out


def test_error_status_in_trailers_after_a_message(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "ErrorAfterMessage")
    assert not out["ok"] and out["err"] == "grpc-status 8: after one message", out
    assert call(driver, "Echo", "x")["ok"], "the next call works"


def test_error_status_in_trailers_without_a_message(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "SetCode")
    assert not out["ok"] and out["err"] == "grpc-status 13: failed after the work", out


def test_trailers_only_error_percent_decoded(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "Abort")
    assert not out["ok"] and out["err"] == "grpc-status 9: no model loaded: naïve 100% sure", out


def test_unknown_method_is_unimplemented(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "/conf.Test/Nope")
    assert not out["ok"] and out["err"].startswith("grpc-status 12:"), out
    assert out["stats"]["retries"] == 0


def test_two_messages_for_a_unary_call_is_an_error(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "TwoMessages")
    assert not out["ok"] and "gRPC frame length" in out["err"], out


# --- a scripted HTTP/2 peer ----------------------------------------------------------------------------


def test_request_headers_are_grpc(peer_at: Any, driver: Driver) -> None:
    seen: list[dict[str, str]] = []

    def script(pc: PeerConn) -> None:
        pc.start()
        sid, headers, body = pc.read_request()
        seen.append(headers)
        assert sid == 1 and body == message(b"hi")
        pc.respond(sid)

    peer_at(script)
    out = call(driver, "/conf.Test/Echo", "hi")
    assert out["ok"] and bytes.fromhex(out["head"]) == b"ok", out
    (h,) = seen
    assert h[":method"] == "POST" and h[":scheme"] == "http" and h[":path"] == "/conf.Test/Echo"
    assert h["content-type"] == "application/grpc" and h["te"] == "trailers" and h[":authority"]
    assert re.fullmatch(r"\d{1,8}m", h["grpc-timeout"]), h
    assert 0.9 * ROOMY_MS <= int(h["grpc-timeout"][:-1]) <= ROOMY_MS + 1, h  # the call's deadline, in ms


def test_continuation_padding_priority_and_unknown_frames(peer_at: Any, driver: Driver) -> None:
    def handle(pc: PeerConn, sid: int, n: int) -> None:
        head = OK_HEADERS
        pad = 3
        pc.send(
            # HEADERS padded and with a priority block, cut in three
            frame(
                HEADERS, PADDED | PRIORITY_FLAG, sid, bytes([pad]) + b"\0\0\0\0\x10" + head[:1] + b"\0" * pad
            ),
            frame(CONTINUATION, 0, sid, head[1:5]),
            frame(CONTINUATION, END_HEADERS, sid, head[5:]),
            frame(0xFA, 0xFF, 0, b"an extension frame"),
            frame(PRIORITY, 0, sid, b"\0\0\0\0\x10"),
            frame(DATA, PADDED, sid, b"\x05" + message(b"hello")[:3] + b"\0" * 5),
            frame(DATA, 0, sid, message(b"hello")[3:]),
            frame(0xFB, 0, sid, b""),
            frame(HEADERS, END_STREAM, sid, OK_TRAILERS[:2]),
            frame(CONTINUATION, END_HEADERS, sid, OK_TRAILERS[2:]),
        )

    peer_at(serve_forever(handle))
    for _ in range(3):
        out = call(driver, "Echo", "x")
        assert out["ok"] and bytes.fromhex(out["head"]) == b"hello", out
    assert out["stats"]["connects"] == 1


def test_huffman_coded_header_values_and_the_dynamic_table(peer_at: Any, driver: Driver) -> None:
    def handle(pc: PeerConn, sid: int, n: int) -> None:
        if n == 0:  # OK; grpc-message Huffman-coded in the trailers, added to the dynamic table
            trailers = (
                OK_TRAILERS + b"\x40\x0cgrpc-message" + bytes([0x80 | len(HUFFMAN_DATE)]) + HUFFMAN_DATE
            )
            pc.send(
                frame(HEADERS, END_HEADERS, sid, OK_HEADERS),
                frame(DATA, 0, sid, message(b"ok")),
                frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers),
            )
        else:  # an error whose grpc-message is that dynamic-table entry (index 62)
            pc.send(
                frame(HEADERS, END_HEADERS | END_STREAM, sid, OK_HEADERS + lit("grpc-status", "14") + b"\xbe")
            )

    peer_at(serve_forever(handle))
    assert call(driver, "Echo", "x")["ok"]
    second = call(driver, "Echo", "x")
    assert second["err"] == "grpc-status 14: Mon, 21 Oct 2013 20:13:21 GMT", second
    assert second["stats"]["connects"] == 1


def test_ping_mid_response_is_answered_before_waiting(peer_at: Any, driver: Driver) -> None:
    acks: list[bytes] = []

    def handle(pc: PeerConn, sid: int, n: int) -> None:
        pc.send(frame(HEADERS, END_HEADERS, sid, OK_HEADERS), frame(PING, 0, 0, b"12345678"))
        acks.append(pc.wait_for(PING, ACK))  # the rest of the response only after the ACK
        pc.send(
            frame(DATA, 0, sid, message(b"pong")), frame(HEADERS, END_HEADERS | END_STREAM, sid, OK_TRAILERS)
        )

    peer = peer_at(serve_forever(handle))
    out = call(driver, "Echo", "x")
    assert out["ok"] and bytes.fromhex(out["head"]) == b"pong", out
    assert acks == [b"12345678"]
    assert any(t == SETTINGS and f & ACK for t, f, _, _ in peer.conns[0].received), "our SETTINGS ACK"
