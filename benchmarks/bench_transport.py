"""Benchmark: the plugin's gRPC client against servers that do nothing, each call in turn.

    .venv/bin/python -m benchmarks.bench_transport [--calls 1000] [--gap-ms 2]

Where the time of a round trip from the plugin goes, outside slurmctld: one Lua process (the
plugin's own harp.grpc, a persistent connection per server) calls each server in turn with an idle
gap before every call, so all servers are measured at the same moments of a shared machine. The
servers, each a process of its own answering an empty Decision: grpcio's thread-pool server with the
daemon's settings (slurm_harp.server.grpc_core) and with grpcio's defaults, the same server with
Predict in its core lane (the daemon's default: slurm_harp.server.unary_lane), grpc.aio's server,
grpc core driven by one Python thread (an experiment: benchmarks/noop_server.py --core-loop), and the
floor: a Python thread answering with canned HTTP/2 frames (not gRPC: no grpcio at all).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from benchmarks.noop_server import AIO, CORE_LOOP, LANE, NoopServer
from tests.conftest import REPO, lua51

DRIVER = REPO / "benchmarks" / "lua" / "alternate.lua"
WARMUP = 20


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing, with a new name."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


HEADERS = b"\x88" + literal(b"content-type", b"application/grpc")  # :status 200 (static index 8)
MESSAGE = b"\x00\x00\x00\x00\x00"  # an empty Decision, gRPC-framed
TRAILERS = literal(b"grpc-status", b"0")


def canned_connection(conn: socket.socket) -> None:
    """Answer every request stream (its DATA with END_STREAM) with HEADERS, DATA and trailers."""
    buf = b""
    with conn:
        while data := conn.recv(65536):
            buf += data
            if buf.startswith(b"PRI * HTTP/2.0"):
                buf = buf[24:]
                conn.sendall(frame(4, 0, 0, b""))  # our SETTINGS
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                size, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
                stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                buf = buf[9 + size :]
                if kind == 0 and flags & 1:
                    conn.sendall(
                        frame(1, 4, stream, HEADERS)
                        + frame(0, 0, stream, MESSAGE)
                        + frame(1, 5, stream, TRAILERS)
                    )
                elif kind == 4 and not flags & 1:
                    conn.sendall(frame(4, 1, 0, b""))  # SETTINGS ACK


@contextlib.contextmanager
def canned_server(sock: Path) -> Iterator[Path]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(4)

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener closed
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=canned_connection, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield sock
    finally:
        listener.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000, help="calls to each server")
    ap.add_argument("--gap-ms", type=float, default=2.0, help="idle time before each call")
    args = ap.parse_args()
    names = (
        "grpcio server, harp's settings",
        "grpcio server, grpcio defaults",
        "grpcio server, Predict lane",
        "grpc.aio server",
        "grpc core, one thread (cygrpc)",
        "canned HTTP/2 (no gRPC)",
    )
    with tempfile.TemporaryDirectory(prefix="harp-transport-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        socks = [
            stack.enter_context(NoopServer(work / "harp.sock")).sock,
            stack.enter_context(NoopServer(work / "defaults.sock", grpcio_defaults=True)).sock,
            stack.enter_context(NoopServer(work / "lane.sock", kind=LANE)).sock,
            stack.enter_context(NoopServer(work / "aio.sock", kind=AIO)).sock,
            stack.enter_context(NoopServer(work / "core.sock", kind=CORE_LOOP)).sock,
            stack.enter_context(canned_server(work / "canned.sock")),
        ]
        argv = [lua51(), str(DRIVER), str(REPO / "plugin"), str(args.calls), str(args.gap_ms)]
        out = subprocess.run([*argv, *map(str, socks)], capture_output=True, text=True, check=True)
    errors = out.stderr.count("\n")
    print(f"{args.calls - WARMUP} calls to each server in turn, {args.gap_ms} ms idle before each; µs")
    print(f"{'server':<32} {'p50':>7} {'p90':>7} {'p99':>7}")
    for name, line in zip(names, out.stdout.splitlines(), strict=True):
        q = statistics.quantiles([int(x) for x in line.split()][WARMUP:], n=100)
        print(f"{name:<32} {q[49]:>7.0f} {q[89]:>7.0f} {q[98]:>7.0f}")
    print(f"failed calls: {errors}")


if __name__ == "__main__":
    main()
