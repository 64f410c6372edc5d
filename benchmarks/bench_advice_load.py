"""Benchmark: Predict latency while users loop heavy advice calls on the same `harp serve`.

    .venv/bin/python -m benchmarks.bench_advice_load [--seconds 15] [--users 2]   (root: callers as real uids)

The plugin gives Predict 50 ms (plugin/harp, deadline_ms) and opens its circuit breaker, harp off
for every job, at one call past it. A real `harp serve` (rewrite mode, the reference models, a job
store, an advice socket, a stand-in scontrol listing 64 partitions) answers Predict from one client
process calling with 20 ms between calls (bench_daemon's request), for --seconds with no advice
asked (the baseline), then for --seconds while --users real uids (root, nobody) each loop the
heaviest advice ask without pause (a thousand runs of the job at 100 sizes, over the 64 partitions,
named), each in a process of its own.
Prints per phase the calls, p50, p99 and the longest call, ms, and how many took over 50 ms; then
the advice calls answered under load.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from pathlib import Path

import grpc

from benchmarks.bench_feed_contention import calls
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from tests.conftest import REPO
from tests.e2e.daemon_process import DaemonProcess
from tests.integration.as_user import channel_as
from tests.integration.test_advice_socket import NOBODY, PARTITIONS, ROOT, SCONTROL, record

DEADLINE_MS = 50.0  # the plugin's default deadline_ms
GAP_S = 0.02
WARM_S = 3.0  # the advice load running before Predict is measured under it
PARTITION = "PartitionName=p{} MaxNodes=UNLIMITED MaxTime=UNLIMITED TotalCPUs=1024 TotalNodes=8 TRES=cpu=1024"
HEAVY = pb.AdviceRequest(job=pb.SubmitRequest(job_name="sim"), partitions=[f"p{i}" for i in range(64)])


def site(work: Path) -> None:
    """The stand-in scontrol (64 partitions) and a job store where root and nobody each ran "sim"
    a thousand times at 100 sizes."""
    (work / "bin").mkdir()
    scontrol = work / "bin" / "scontrol"
    scontrol.write_text(SCONTROL.replace(PARTITIONS, "\n".join(PARTITION.format(i) for i in range(64))))
    scontrol.chmod(0o755)
    runs = [
        record(base + i, user, uid, "sim", 1 + i % 100, 6000 // (1 + i % 100) + 60)
        for base, user, uid in ((100, "root", ROOT), (5000, "nobody", NOBODY.pw_uid))
        for i in range(1000)
    ]
    with JobStore(work / "jobs.sqlite") as store:
        store.merge(runs, "sacct")


def _advise(uid: int, sock: str, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    answered = 0
    with channel_as(uid, Path(sock)) as channel:
        stub = pb_grpc.AdvisorStub(channel)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with contextlib.suppress(grpc.RpcError):
                stub.Advise(HEAVY, timeout=30)
                answered += 1
    out.put(answered)


def measure(sock: Path, seconds: float) -> list[float]:
    """Predict's latencies, ms, sorted."""
    return sorted(x * 1e3 for x in calls(sock, seconds, GAP_S))


def row(label: str, lat: list[float]) -> str:
    n = len(lat)
    over = sum(x > DEADLINE_MS for x in lat)
    return f"{label:<34} {n:>6} {lat[n // 2]:>7.2f} {lat[int(n * 0.99)]:>7.2f} {lat[-1]:>7.1f} {over:>9}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--users", type=int, choices=(1, 2), default=2)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_advice_load: root only (the advice callers are real uids)")
    work = Path(tempfile.mkdtemp(prefix="harp-bench-advice-"))
    work.chmod(0o755)  # nobody reaches the advice socket
    try:
        site(work)
        shutil.copytree(REPO / "models" / "reference", work / "store")
        extra = f'[history]\ndb = "{work / "jobs.sqlite"}"\n[advice]\nsocket = "{work / "advice.sock"}"\n'
        env = {**os.environ, "PATH": f"{work / 'bin'}:{os.environ['PATH']}", "HARP_LOG_LEVEL": "WARNING"}
        daemon = DaemonProcess(work, work / "store", mode="rewrite", extra=extra, env=env)
        daemon.start()
        try:
            baseline = measure(daemon.socket, args.seconds)
            answered: mp.Queue = mp.Queue()  # type: ignore[type-arg]
            users = [ROOT, NOBODY.pw_uid][: args.users]
            load = [
                mp.Process(
                    target=_advise, args=(uid, str(work / "advice.sock"), args.seconds + WARM_S, answered)
                )
                for uid in users
            ]
            for proc in load:
                proc.start()
            time.sleep(WARM_S)
            loaded = measure(daemon.socket, args.seconds)
            calls = sum(answered.get() for _ in load)
            for proc in load:
                proc.join()
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"Predict every {GAP_S * 1e3:.0f} ms for {args.seconds:g} s per phase; "
        f"over: calls past {DEADLINE_MS:g} ms"
    )
    print(f"{'phase':<34} {'calls':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'over':>9}")
    print(row("no advice asked (baseline)", baseline))
    print(row(f"{len(users)} users looping heavy advice", loaded))
    print(f"heavy advice calls answered under load: {calls}")


if __name__ == "__main__":
    main()
