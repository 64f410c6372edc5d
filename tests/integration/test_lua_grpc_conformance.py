"""Conformance of the plugin's own HTTP/2 + gRPC client (plugin/harp/h2.lua, grpc.lua).

Part 1 talks to a real grpcio server: OK responses, error statuses in trailers and in trailers-only
responses, deadlines, large messages both ways (flow control), MAX_RESPONSE, many calls on one
connection, GOAWAY on a server's (graceful) stop and restart.
Part 2 talks to a scripted HTTP/2 peer, for what grpcio never sends but a server may: CONTINUATION,
padding, PRIORITY and unknown frames, Huffman-coded header values, a PING mid-response, a small peer
window (the request body split and paced), RST_STREAM, a GOAWAY refusing the stream, and protocol
violations. Every failure must come back as an error string (the plugin then fails open), never as a
Lua error or a hang.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from slurm_harp.server.unary_lane import UnaryLane
from tests.integration.test_lua_grpc import SLACK_MS, Driver

SERVICE = "conf.Test"
PATTERN = bytes(range(256))


def pattern(n: int) -> bytes:
    return (PATTERN * (n // 256 + 1))[:n]


class Recorder:
    def __init__(self) -> None:
        self.time_remaining: list[float] = []
        self.metadata: list[dict[str, str]] = []


def conformance_handlers(rec: Recorder) -> dict[str, Any]:
    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        return request

    def big(request: bytes, context: grpc.ServicerContext) -> bytes:
        return pattern(int(request))

    def sleep(request: bytes, context: grpc.ServicerContext) -> bytes:
        rec.time_remaining.append(context.time_remaining())
        rec.metadata.append({k: str(v) for k, v in context.invocation_metadata()})
        time.sleep(float(request or b"0"))
        return b"slept"

    def abort(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no model loaded: naïve 100% sure")

    def set_code(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.set_code(grpc.StatusCode.INTERNAL)
        context.set_details("failed after the work")
        return b"never sent"

    def error_after_message(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"first"
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "after one message")

    def two_messages(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"one"
        yield b"two"

    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    return {
        "Echo": unary(echo),
        "Big": unary(big),
        "Sleep": unary(sleep),
        "Abort": unary(abort),
        "SetCode": unary(set_code),
        "Empty": unary(lambda request, context: b""),
        "ErrorAfterMessage": stream(error_after_message),
        "TwoMessages": stream(two_messages),
    }


def lane_sleep(request: bytes) -> bytes:
    time.sleep(float(request or b"0"))
    return b"slept"


# Unary methods that the server can also answer in a core lane (slurm_harp.server.unary_lane).
LANE_METHODS = {
    "Echo": lambda request: request,
    "Big": lambda request: pattern(int(request)),
    "Sleep": lane_sleep,
    "Empty": lambda request: b"",
}


def start_conformance_server(sock: Path, rec: Recorder, lane: bool = False) -> grpc.Server:
    """grpcio's server; with ``lane``, Echo, Big, Sleep and Empty are answered in core lanes
    (as the daemon answers Predict) and the other methods by the worker pool beside them."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    lanes = []
    if lane:
        for name, handler in LANE_METHODS.items():
            attached = UnaryLane.attach(server, f"/{SERVICE}/{name}", handler)
            assert attached is not None, "the pinned grpcio offers the core lane"
            lanes.append(attached)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, conformance_handlers(rec)),)
    )
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    for attached in lanes:
        attached.start()
    return server


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "conf.sock"


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture(params=[False, True], ids=["pool", "lane"])
def lane(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def server(sock: Path, rec: Recorder, lane: bool) -> Iterator[grpc.Server]:
    srv = start_conformance_server(sock, rec, lane)
    yield srv
    srv.stop(0)


@pytest.fixture
def pool_server(sock: Path, rec: Recorder) -> Iterator[grpc.Server]:
    srv = start_conformance_server(sock, rec)
    yield srv
    srv.stop(0)


@pytest.fixture
def driver(sock: Path) -> Iterator[Driver]:
    drv = Driver(sock)
    yield drv
    drv.close()


def call(drv: Driver, method: str, payload: str = "", deadline_ms: float = 2000, **kw: Any) -> dict[str, Any]:
    path = method if method.startswith("/") else f"/{SERVICE}/{method}"
    out = drv("raw", method=path, payload=payload, deadline_ms=deadline_ms, **kw)
    assert "raised" not in str(out.get("err")), out  # a Lua error must never escape
    return out


def expect_pattern(out: dict[str, Any], n: int) -> None:
    assert out["ok"], out
    assert out["size"] == n and out["sum"] == sum(pattern(n)), out
    assert bytes.fromhex(out["head"]) == pattern(min(n, 64))


# --- Part 1: a real grpcio server ----------------------------------------------------------------------


def test_ok_response_with_headers_grpc_accepts(
    pool_server: grpc.Server, rec: Recorder, driver: Driver
) -> None:
    out = call(driver, "Sleep", "0", deadline_ms=80)
    assert out["ok"] and bytes.fromhex(out["head"]) == b"slept", out
    (remaining,) = rec.time_remaining
    assert 0 < remaining <= 0.081, "grpc-timeout carries the call's deadline"
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


def test_deadline_exceeded_against_a_slow_handler(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "Sleep", "0.3", deadline_ms=50)
    assert not out["ok"] and out["err"] == "deadline exceeded", out
    assert 45 <= out["ms"] < 50 + SLACK_MS, out
    assert out["connected"] is False, "a timed-out connection is dropped"
    assert call(driver, "Echo", "x")["ok"]


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
        srv.stop(0)


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
        srv.stop(0)


def test_sigpipe_does_not_kill_the_host(sock: Path, rec: Recorder) -> None:
    drv = Driver(sock)
    try:
        assert drv("set")["sigpipe"] in ("blocked", "ignored", "ignored by harp.h2")
    finally:
        drv.close()


# --- Part 2: a scripted HTTP/2 peer --------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 1, 1, 4, 8, 32
STATIC = {
    1: ":authority",
    2: ":method",
    3: ":method",
    4: ":path",
    6: ":scheme",
    31: "content-type",
    58: "user-agent",
}
STATIC_VALUES = {2: "GET", 3: "POST", 6: "http"}
# RFC 7541 C.6.1: Huffman code of "Mon, 21 Oct 2013 20:13:21 GMT"
HUFFMAN_DATE = bytes.fromhex("d07abe941054d444a8200595040b8166e082a62d1bff")


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def lit(name: str, value: str | bytes) -> bytes:
    """Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    v = value.encode() if isinstance(value, str) else value
    assert len(name) < 127 and len(v) < 127
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(v)]) + v


def message(body: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + struct.pack(">I", len(body)) + body


OK_HEADERS = b"\x88" + lit("content-type", "application/grpc")  # :status 200 (static index 8)
OK_TRAILERS = lit("grpc-status", "0")


def decode_request_block(block: bytes) -> dict[str, str]:
    """Our request blocks: static-table entries and literals without indexing (no Huffman)."""
    out: dict[str, str] = {}
    i = 0

    def string(i: int) -> tuple[str, int]:
        n = block[i]
        assert n < 127 and not n & 0x80, "no Huffman, short strings"
        return block[i + 1 : i + 1 + n].decode(), i + 1 + n

    while i < len(block):
        b = block[i]
        if b & 0x80:
            out[STATIC[b & 0x7F]] = STATIC_VALUES[b & 0x7F]
            i += 1
        else:
            assert b & 0xF0 == 0, f"literal without indexing expected, got {b:#x}"
            index = b & 0x0F
            i += 1
            if index == 15:
                index += block[i]
                i += 1
            if index:
                name = STATIC[index]
            else:
                name, i = string(i)
            out[name], i = string(i)
    return out


class PeerConn:
    """One accepted connection of the scripted peer: frame I/O and what the client sent."""

    def __init__(self, conn: socket.socket, index: int) -> None:
        self.conn = conn
        self.index = index
        self.buf = b""
        self.received: list[tuple[int, int, int, bytes]] = []
        conn.settimeout(5)

    def _need(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise EOFError("client closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self) -> tuple[int, int, int, bytes]:
        head = self._need(9)
        n = int.from_bytes(head[:3], "big")
        f = (head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, self._need(n))
        self.received.append(f)
        return f

    def start(self, settings: bytes = b"") -> None:
        assert self._need(len(PREFACE)) == PREFACE
        self.send(frame(SETTINGS, 0, 0, settings))

    def read_request(
        self, on_data: Callable[[int, bytes], None] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """Frames until the client ends a stream: (stream id, request headers, body)."""
        headers: dict[str, str] = {}
        body = b""
        while True:
            ftype, flags, sid, payload = self.read_frame()
            if ftype == HEADERS:
                assert flags & END_HEADERS
                headers = decode_request_block(payload)
            elif ftype == DATA:
                body += payload
                if on_data:
                    on_data(sid, payload)
                if flags & END_STREAM:
                    return sid, headers, body

    def wait_for(self, ftype: int, flags: int, timeout: float = 2.0) -> bytes:
        self.conn.settimeout(timeout)
        while True:
            t, f, _, payload = self.read_frame()
            if t == ftype and f & flags == flags:
                return payload

    def send(self, *frames: bytes) -> None:
        self.conn.sendall(b"".join(frames))

    def respond(self, sid: int, body: bytes = b"ok") -> None:
        self.send(
            frame(HEADERS, END_HEADERS, sid, OK_HEADERS),
            frame(DATA, 0, sid, message(body)),
            frame(HEADERS, END_HEADERS | END_STREAM, sid, OK_TRAILERS),
        )


class ScriptedPeer:
    """A Unix-socket HTTP/2 'server' running script(conn) for each connection, in a thread."""

    def __init__(self, path: Path, script: Callable[[PeerConn], None]) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(8)
        self.script = script
        self.conns: list[PeerConn] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            pc = PeerConn(conn, len(self.conns))
            self.conns.append(pc)
            threading.Thread(target=self._run, args=(pc,), daemon=True).start()

    def _run(self, pc: PeerConn) -> None:
        try:
            self.script(pc)
        except (EOFError, ConnectionError, TimeoutError):
            pass  # the client hung up: expected after an error
        except BaseException as e:  # reported by the test's teardown
            self.errors.append(e)

    def close(self) -> None:
        self.listener.close()
        for pc in self.conns:
            pc.conn.close()


@pytest.fixture
def peer_at(sock: Path) -> Iterator[Callable[[Callable[[PeerConn], None]], ScriptedPeer]]:
    peers: list[ScriptedPeer] = []

    def make(script: Callable[[PeerConn], None]) -> ScriptedPeer:
        peers.append(ScriptedPeer(sock, script))
        return peers[-1]

    yield make
    for p in peers:
        p.close()
    for p in peers:
        assert not p.errors, p.errors


def serve_forever(handle: Callable[[PeerConn, int, int], None]) -> Callable[[PeerConn], None]:
    """A script answering each request with handle(conn, stream id, request number on this conn)."""

    def script(pc: PeerConn) -> None:
        pc.start()
        n = 0
        while True:
            sid, _, _ = pc.read_request()
            handle(pc, sid, n)
            n += 1

    return script


def test_request_headers_are_grpc(peer_at: Any, driver: Driver) -> None:
    seen: list[dict[str, str]] = []

    def script(pc: PeerConn) -> None:
        pc.start()
        sid, headers, body = pc.read_request()
        seen.append(headers)
        assert sid == 1 and body == message(b"hi")
        pc.respond(sid)

    peer_at(script)
    out = call(driver, "/conf.Test/Echo", "hi", deadline_ms=500)
    assert out["ok"] and bytes.fromhex(out["head"]) == b"ok", out
    (h,) = seen
    assert h[":method"] == "POST" and h[":scheme"] == "http" and h[":path"] == "/conf.Test/Echo"
    assert h["content-type"] == "application/grpc" and h["te"] == "trailers" and h[":authority"]
    assert re.fullmatch(r"\d{1,8}m", h["grpc-timeout"]) and 450 <= int(h["grpc-timeout"][:-1]) <= 501, h


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
        out = call(driver, "Echo", "x", deadline_ms=500)
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
    assert call(driver, "Echo", "x", deadline_ms=500)["ok"]
    second = call(driver, "Echo", "x", deadline_ms=500)
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
    out = call(driver, "Echo", "x", deadline_ms=1000)
    assert out["ok"] and bytes.fromhex(out["head"]) == b"pong", out
    assert acks == [b"12345678"]
    assert any(t == SETTINGS and f & ACK for t, f, _, _ in peer.conns[0].received), "our SETTINGS ACK"


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
    assert call(driver, "Echo", "x", deadline_ms=500)["ok"]
    out = call(driver, "Echo", "0123456789", deadline_ms=1000, **{"repeat": 10})
    assert out["ok"] and bytes.fromhex(out["head"]) == b"paced", out
    assert sizes and max(sizes) <= 16 and sum(sizes) == 105, sizes


def test_goaway_refusing_the_stream_is_retried_on_a_fresh_connection(peer_at: Any, driver: Driver) -> None:
    def handle(pc: PeerConn, sid: int, n: int) -> None:
        if pc.index == 0 and n == 1:  # the second request on the first connection: not processed
            pc.send(frame(GOAWAY, 0, 0, struct.pack(">II", sid - 2, 0) + b"restarting"))
            pc.conn.close()
            raise EOFError
        pc.respond(sid)

    peer_at(serve_forever(handle))
    assert call(driver, "Echo", "x", deadline_ms=500)["ok"]
    out = call(driver, "Echo", "x", deadline_ms=500)
    assert out["ok"], out
    assert out["stats"]["retries"] == 1 and out["stats"]["connects"] == 2, out


def test_goaway_while_idle_means_a_new_connection_without_retry(peer_at: Any, driver: Driver) -> None:
    def handle(pc: PeerConn, sid: int, n: int) -> None:
        pc.respond(sid)
        if pc.index == 0:
            pc.send(frame(GOAWAY, 0, 0, struct.pack(">II", sid, 0)))

    peer_at(serve_forever(handle))
    assert call(driver, "Echo", "x", deadline_ms=500)["ok"]
    time.sleep(0.05)
    out = call(driver, "Echo", "x", deadline_ms=500)
    assert out["ok"] and out["stats"]["retries"] == 0 and out["stats"]["connects"] == 2, out


def test_refused_stream_on_a_fresh_connection_is_not_retried(peer_at: Any, driver: Driver) -> None:
    peer_at(serve_forever(lambda pc, sid, n: pc.send(frame(RST_STREAM, 0, sid, struct.pack(">I", 7)))))
    out = call(driver, "Echo", "x", deadline_ms=500)
    assert out["err"] == "stream reset by the server: REFUSED_STREAM", out
    assert out["stats"]["retries"] == 0


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
    out = call(driver, "Echo", "x", deadline_ms=500)
    assert not out["ok"] and "first frame is not SETTINGS" in out["err"], out


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
