"""Benchmark: Predict latency while the history feed reads the job store in the daemon's process.

    .venv/bin/python -m benchmarks.bench_feed_contention [--jobs 100000] [--seconds 6] [--rounds 2]
        [--added 500]

The feed polls the store in a thread of its own; when the harvester added rows, a poll reads those
rows. While it runs, the thread answering Predict (the lane, in grpcio's polling thread) needs the
interpreter each time a call arrives and waits until the feed's thread is made to let go, after the
switch interval. A daemon (rewrite mode, the bundled model, its own socket) runs in this process
beside a HistoryFeed on a store of --jobs generated jobs (benchmarks.bench_gc_pause) that polls
without pause, each poll as when the harvester added --added rows (or, in the last variant,
rebuilding the index from the whole window, as when the store was replaced), settling the heap as
`harp serve` does. A client process calls Predict with 2 ms between calls for --seconds. Variants,
in turn for --rounds rounds: no feed running (the baseline); the feed polling with CPython's switch
interval (5 ms); the feed polling with `harp serve`'s (commands/serve.py, SWITCH_INTERVAL_S); the
feed rebuilding with `harp serve`'s. Prints p50, p99, p99.9 and the longest call, ms; first, what
one poll costs, and what each poll did before: re-read the two-day look-back, and walk every key for
stale ones.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry

from benchmarks.bench_daemon import REQUEST
from benchmarks.bench_gc_pause import NOW, jobs
from benchmarks.common import train_bundled
from slurm_harp.accounting.jobstore import JobStore, Position
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.commands.serve import SWITCH_INTERVAL_S
from slurm_harp.config import HistorySettings, parse
from slurm_harp.server import heap
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.history_feed import HistoryFeed

GAP_S = 0.002
LOOKBACK_S = 2 * 86400  # what each poll re-read before it read by rowid


def _client(sock: str, seconds: float, gap_s: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    channel = grpc.insecure_channel(f"unix:{sock}")
    stub = pb_grpc.PredictorStub(channel)
    for _ in range(50):
        stub.Predict(REQUEST, timeout=5)  # warm the connection
    latencies = []
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(gap_s)
        started = time.perf_counter()
        stub.Predict(REQUEST, timeout=5)
        latencies.append(time.perf_counter() - started)
    channel.close()
    out.put(latencies)


def calls(sock: Path, seconds: float, gap_s: float = GAP_S) -> list[float]:
    """Predict's latencies, s, from a client process calling for ``seconds``, ``gap_s`` between calls."""
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    process = mp.Process(target=_client, args=(str(sock), seconds, gap_s, out))
    process.start()
    latencies: list[float] = out.get()
    process.join()
    return latencies


def back(db: Path, rows: int) -> Position:
    """The store's position before its last ``rows`` rows were added."""
    with JobStore(db, readonly=True) as store:
        now = store.position()
    with sqlite3.connect(db) as con:
        last = now.last_row - rows
        source, job_id = con.execute("SELECT source, job_id FROM jobs WHERE rowid = ?", (last,)).fetchone()
    return Position(now.rows - rows, last, (source, job_id), now.ingested)  # one merge: one ingested_at


class Polling:
    """The feed polling without pause in a thread, each poll as when the harvester had added
    ``earlier``'s rows since (or, with ``earlier`` None, rebuilding the index from the whole window,
    as when the store was replaced)."""

    def __init__(self, feed: HistoryFeed, db: Path, earlier: Position | None) -> None:
        self._feed, self._db, self._earlier = feed, db, earlier
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.polls = 0

    def _run(self) -> None:
        with JobStore(self._db, readonly=True) as store:
            while not self._stop.is_set():
                self._feed._position = self._earlier
                self._feed.refresh(store)
                self.polls += 1

    def __enter__(self) -> Polling:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def poll_costs(feed: HistoryFeed, db: Path, earlier: Position, repeat: int = 5) -> dict[str, float]:
    """Median ms of: one poll reading the rows added since ``earlier``; re-reading every job
    submitted within two days, as each poll did before it read by rowid; the walk of every key for
    stale ones, which each poll made before it was made once a day."""
    took: dict[str, list[float]] = {"added": [], "look-back": [], "walk": []}
    with JobStore(db, readonly=True) as store:
        for i in range(repeat):
            feed._position = earlier
            started = time.perf_counter()
            feed.refresh(store)
            took["added"].append(time.perf_counter() - started)
            started = time.perf_counter()
            for _ in store.records(since=NOW - LOOKBACK_S):
                pass
            took["look-back"].append(time.perf_counter() - started)
            started = time.perf_counter()
            feed.index.expire(NOW + (i + 1) * 86400)  # a day on each time: every key walked
            took["walk"].append(time.perf_counter() - started)
    return {name: statistics.median(values) * 1e3 for name, values in took.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--added", type=int, default=500, help="rows each poll finds added")
    args = ap.parse_args()
    default_interval = sys.getswitchinterval()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train_bundled(work / "models")
        db = work / "jobs.sqlite"
        with JobStore(db) as store:
            store.merge(list(jobs(args.jobs, 0, random.Random(5))), "sacct")
        feed = HistoryFeed(HistorySettings(db=db, poll_seconds=60), clock=lambda: float(NOW))
        feed.settle = heap.settle
        with JobStore(db, readonly=True) as store:
            feed.refresh(store)  # seeded before any variant: the polls are what is measured
        earlier = back(db, args.added)
        costs = poll_costs(feed, db, earlier)
        sock = work / "harp.sock"
        settings = {"server": {"socket": str(sock)}, "store": {"path": str(work / "models")}}
        daemon = Daemon(parse(settings | {"policy": {"mode": "rewrite"}}), CollectorRegistry())
        daemon.start()
        variants = {
            "no feed running": (None, None),
            f"feed polling, switch interval {default_interval * 1e3:g} ms": (default_interval, earlier),
            f"feed polling, switch interval {SWITCH_INTERVAL_S * 1e3:g} ms": (SWITCH_INTERVAL_S, earlier),
            f"feed rebuilding, switch interval {SWITCH_INTERVAL_S * 1e3:g} ms": (SWITCH_INTERVAL_S, None),
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        polls = 0
        try:
            for _ in range(args.rounds):
                for name, (interval, since) in variants.items():
                    if interval is None:
                        results[name] += calls(sock, args.seconds)
                        continue
                    sys.setswitchinterval(interval)
                    with Polling(feed, db, since) as polling:
                        results[name] += calls(sock, args.seconds)
                    polls += polling.polls
                    sys.setswitchinterval(default_interval)
        finally:
            daemon.stop(0)
    print(f"{args.jobs:,} jobs in the store, {len(feed.index):,} history keys")
    print(
        f"one poll, {args.added} rows added: {costs['added']:.1f} ms; as polls did before, re-reading"
        f" the two-day look-back: {costs['look-back']:.1f} ms, and walking every key for stale ones:"
        f" {costs['walk']:.1f} ms, now once a day (medians of 5)"
    )
    print(f"{polls} polls measured, each finding {args.added} rows added (or rebuilding);")
    rounds = f"{args.rounds} rounds of {args.seconds:g} s per variant"
    print(f"one client, {GAP_S * 1e3:g} ms between calls, {rounds}")
    print(f"{'variant':<41} {'calls':>6} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>9} {'max ms':>7}")
    for name, latencies in results.items():
        q = statistics.quantiles(latencies, n=1000)
        print(
            f"{name:<41} {len(latencies):>6} {q[499] * 1e3:>7.3f} {q[989] * 1e3:>7.3f}"
            f" {q[998] * 1e3:>9.3f} {max(latencies) * 1e3:>7.1f}"
        )


if __name__ == "__main__":
    main()
