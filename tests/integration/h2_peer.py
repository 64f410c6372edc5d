"""A scripted HTTP/2 peer on a Unix socket, for what grpcio never sends but a server may.

Frame, HPACK literal and gRPC message builders, a decoder of the plugin's request header blocks, one
accepted connection's frame I/O (PeerConn), the peer running a script per connection in a thread
(ScriptedPeer), and serve_forever, a script answering each request in turn.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

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
