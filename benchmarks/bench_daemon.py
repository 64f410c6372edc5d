"""Benchmark: the daemon alone over its Unix socket, vs. a no-op gRPC server in the same run.

    .venv/bin/python -m benchmarks.bench_daemon [--calls 3000] [--clients 1 16]

Clients are separate processes (the GIL would otherwise measure the client, not the daemon). Prints
predictions/s and p50/p99 latency per concurrency, for the real daemon (real ONNX model, rewrite policy)
and for a baseline server that answers an empty Decision without any work; each with Predict in
the core lane (the daemon's default, slurm_harp.server.unary_lane) and in grpcio's worker pool
("worker pool": server.predict_lane = false).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path
from unittest.mock import Mock

import grpc

from benchmarks.common import serving, train_bundled
from benchmarks.noop_server import LANE, NoopServer
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from tests.e2e.daemon_process import DaemonProcess

POOL = ", worker pool"
REQUEST = pb.SubmitRequest(
    user_name="u42",
    user_id=42,
    account="research",
    partition="batch",
    job_name="app7",
    time_limit_minutes=600,
    min_cpus=16,
    min_nodes=1,
    submit_time=860_000_000,
)


def _client(sock: str, calls: int, start: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    channel = grpc.insecure_channel(f"unix:{sock}")
    stub = pb_grpc.PredictorStub(channel)
    for _ in range(20):
        stub.Predict(REQUEST, timeout=5)  # warm the connection
    while time.time() < start:
        time.sleep(0.001)
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        stub.Predict(REQUEST, timeout=5)
        lat.append(time.perf_counter() - t)
    channel.close()
    out.put(lat)


def measure(sock: Path, clients: int, calls: int) -> tuple[float, float, float]:
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    per = max(calls // clients, 1)
    start = time.time() + 1.0
    procs = [mp.Process(target=_client, args=(str(sock), per, start, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    lats = [x for _ in procs for x in out.get()]
    wall = time.time() - start
    for p in procs:
        p.join()
    q = statistics.quantiles(lats, n=100)
    return len(lats) / wall, q[49] * 1e3, q[98] * 1e3


def in_process(store: Path, gap_s: float, calls: int = 500) -> float:
    """p50 µs of PredictorService.Predict called directly (no transport), with an idle sleep between calls."""
    _, service = serving(store)
    context = Mock(spec=grpc.ServicerContext)  # no transport: predict does not use its context
    body = REQUEST.SerializeToString()  # the handler parses the bytes itself, as gRPC hands them over
    times = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        t = time.perf_counter()
        service.predict(body, context)
        times.append(time.perf_counter() - t)
    return statistics.median(times[50:]) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        store = work / "store"
        train_bundled(store)
        hot, idle = in_process(store, 0.0), in_process(store, 0.007)
        rows = []
        for label, lane in (("", True), (POOL, False)):
            lane_key = f"predict_lane = {str(lane).lower()}\n"
            daemon = DaemonProcess(work, store, mode="rewrite", server_extra=lane_key)
            daemon.start()
            try:
                for n in args.clients:
                    rows.append(("harp daemon" + label, n, *measure(daemon.socket, n, args.calls)))
            finally:
                daemon.stop()
            # The baseline runs in its own process like the daemon, so both are measured the same way.
            with NoopServer(work / "noop.sock", kind=LANE if lane else "") as noop:
                for n in args.clients:
                    rows.append(("no-op server" + label, n, *measure(noop.sock, n, args.calls)))
    print(
        f"daemon's own work per call (no transport), p50: {hot:.0f} µs back to back,"
        f" {idle:.0f} µs after 7 ms idle"
    )
    print(f"{'server':<32} {'clients':>7} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for name, n, rate, p50, p99 in rows:
        print(f"{name:<32} {n:>7} {rate:>9.0f} {p50:>8.3f} {p99:>8.3f}")
    figures = {(name, n): (rate, p50) for name, n, rate, p50, _ in rows}
    for label in ("", POOL):
        for n in args.clients:
            (rate, p50), (brate, bp50) = figures["harp daemon" + label, n], figures["no-op server" + label, n]
            print(
                f"ratio daemon/baseline{label} at {n} clients: "
                f"throughput {rate / brate:.2f}, p50 {p50 / bp50:.2f}"
            )


if __name__ == "__main__":
    main()
