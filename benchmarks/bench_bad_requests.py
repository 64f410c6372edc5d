"""Benchmark: memory of a server answering 100,000 requests that do not parse.

    .venv/bin/python -m benchmarks.bench_bad_requests [--calls 100000]

A request with a job name that is not UTF-8 fails protobuf parsing. Measured in one run, each server
in its own process, RSS read from /proc every tenth of the calls:
- baseline: a grpcio server whose Predict handler is registered with the protobuf deserializer, as
  generated code registers it: the failure goes through grpcio's own path (grpc/grpc#36908);
- `harp serve` (the bundled trace's model), which registers Predict with identity (de)serializers and
  parses the bytes itself, answering a bad_request Decision;
- the same `harp serve` answering valid requests, for the shape of a flat curve.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import sys
import tempfile
from concurrent import futures
from multiprocessing.synchronize import Event
from pathlib import Path

import grpc

from benchmarks.common import train_bundled
from slurm_harp.api import predictor_pb2 as pb
from tests.e2e.daemon_process import DaemonProcess

METHOD = "/harp.v1.Predictor/Predict"
BAD = bytes([6 << 3 | 2, 5]) + b"\xff\xfejob"
GOOD = pb.SubmitRequest(user_name="u5", time_limit_minutes=60, min_cpus=1).SerializeToString()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _generated_style_server(sock: str, ready: Event) -> None:
    def predict(_request: pb.SubmitRequest, _context: grpc.ServicerContext) -> pb.Decision:
        return pb.Decision(mode="off")

    method = grpc.unary_unary_rpc_method_handler(
        predict,
        request_deserializer=pb.SubmitRequest.FromString,
        response_serializer=pb.Decision.SerializeToString,
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    handler = grpc.method_handlers_generic_handler("harp.v1.Predictor", {"Predict": method})
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    ready.set()
    server.wait_for_termination()


def curve(sock: Path, pid: int, body: bytes, calls: int) -> list[float]:
    """RSS (MB) before the calls and after every tenth of them."""
    points = [rss_mb(pid)]
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        call = channel.unary_unary(METHOD, None, None)
        for i in range(1, calls + 1):
            # The generated-style server answers INTERNAL: what tripped the plugin's breaker.
            with contextlib.suppress(grpc.RpcError):
                call(body, timeout=5)
            if i % (calls // 10) == 0:
                points.append(rss_mb(pid))
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sock = work / "baseline.sock"
        ready = multiprocessing.get_context("fork").Event()
        fork = multiprocessing.get_context("fork")
        proc = fork.Process(target=_generated_style_server, args=(str(sock), ready))
        proc.start()
        ready.wait(30)
        rows.append(("baseline: protobuf deserializer, bad", curve(sock, proc.pid or 0, BAD, args.calls)))
        proc.terminate()
        proc.join()
        store = work / "store"
        train_bundled(store)
        daemon = DaemonProcess(work, store, mode="rewrite")
        daemon.start()
        assert daemon.proc is not None
        for name, body in (("harp serve, bad", BAD), ("harp serve, good", GOOD)):
            rows.append((name, curve(daemon.socket, daemon.proc.pid, body, args.calls)))
        daemon.stop()
    print(f"{args.calls:,} calls per server, one client; RSS in MB before and after each tenth")
    for name, points in rows:
        grown = points[-1] - points[1]
        line = " ".join(f"{p:.0f}" for p in points)
        print(f"{name:<40} {line}  (+{grown:.1f} MB after the first tenth)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
