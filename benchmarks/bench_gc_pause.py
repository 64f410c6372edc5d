"""Benchmark: how long Python's garbage collector stops the daemon while its job history grows.

    .venv/bin/python -m benchmarks.bench_gc_pause [--jobs 300000] [--polls 40]

A full collection holds the interpreter, so a Predict call that falls in one waits it out (past the
plugin's deadline, it fails open while slurmctld waits). Each variant runs in a process of its own
(the collector's state is the process's), through the history feed's phases with generated jobs
(2,000 users; job names and script signatures many, as on a large site):
- seed: read --jobs records into a list, then add them to a HistoryIndex (the feed's rebuild);
- polls: --polls times, 2,000 newer jobs added (the feed's poll);
- rebuild: the whole window read and built again beside the live index (a store replaced).
``gc.callbacks`` time every collection, and every settle is timed whole. Printed per phase: the full
(generation 2) collections, the longest and the total pause, the longest collection of any
generation, and the settles' longest and total time. Variants: the collector as CPython sets it
(the baseline), and with server.heap.settle called as the feed calls it (through
server.heap.settling: every RECORDS_PER_SETTLE records read or added; and after each poll).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from slurm_harp.core.history import HistoryIndex
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.server.heap import settle, settling

NOW = 1_800_000_000
POLL_JOBS = 2_000


class Pauses:
    """Every collection's duration, by generation, from gc.callbacks."""

    def __init__(self) -> None:
        self.full: list[float] = []
        self.longest_any = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.longest_any = max(self.longest_any, took)
        if info["generation"] == 2:
            self.full.append(took)

    def take(self) -> dict[str, float]:
        out = {
            "full": len(self.full),
            "longest_ms": max(self.full, default=0.0) * 1e3,
            "total_ms": sum(self.full) * 1e3,
            "longest_any_ms": self.longest_any * 1e3,
        }
        self.full, self.longest_any = [], 0.0
        return out


def jobs(n: int, first: int, rng: random.Random) -> Iterator[JobRecord]:
    """``n`` jobs ended over the 20 days before NOW, ids from ``first``."""
    span = 20 * 86400
    for i in range(first, first + n):
        submit = NOW - span + (i * span) // (first + n)
        request = JobRequest(
            user_name=f"u{rng.randrange(2000)}",
            account=f"a{rng.randrange(300)}",
            job_name=f"job{rng.randrange(max(n // 8, 1))}",
            script_signature=f"{rng.randrange(max(n // 4, 1)):x}",
            time_limit_minutes=60,
            submit_time=submit,
        )
        elapsed = 100 + rng.randrange(3000)
        yield JobRecord(str(i), request, "COMPLETED", elapsed, end_time=min(submit + elapsed, NOW - 1))


class Settles:
    """server.heap.settle, each call timed whole (the collection and the freeze)."""

    def __init__(self) -> None:
        self.took: list[float] = []

    def __call__(self) -> None:
        started = time.perf_counter()
        settle()
        self.took.append(time.perf_counter() - started)

    def take(self) -> dict[str, float]:
        out = {"settles": len(self.took), "settle_longest_ms": max(self.took, default=0.0) * 1e3}
        out["settle_total_ms"] = sum(self.took) * 1e3
        self.took = []
        return out


def build(records: Iterator[JobRecord], every: Callable[[], object] | None) -> HistoryIndex:
    read = list(settling(records, every))
    index = HistoryIndex()
    for record in settling(iter(read), every):
        index.add(record)
    return index


def child(n: int, polls: int, settled: bool) -> None:
    settles = Settles()
    every = settles if settled else None
    rng = random.Random(1)
    pauses = Pauses()
    figures: dict[str, dict[str, float]] = {}
    index = build(jobs(n, 0, rng), every)
    if every is not None:
        every()
    figures["seed"] = pauses.take() | settles.take()
    for p in range(polls):
        for record in settling(jobs(POLL_JOBS, n + p * POLL_JOBS, rng), every):
            index.add(record)
        if every is not None:
            every()
    figures["polls"] = pauses.take() | settles.take()
    again = build(jobs(n, 0, random.Random(1)), every)
    if every is not None:
        every()
    figures["rebuild"] = pauses.take() | settles.take()
    figures["keys"] = {"live": len(index), "rebuilt": len(again)}
    print(json.dumps(figures))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=300_000)
    ap.add_argument("--polls", type=int, default=40)
    ap.add_argument("--child", choices=("cpython", "settled"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.jobs, args.polls, args.child == "settled")
        return
    print(
        f"{args.jobs:,} jobs seeded, {args.polls} polls of {POLL_JOBS:,}, one rebuild; "
        "each variant in its own process"
    )
    print(
        f"{'variant':<10} {'phase':<8} {'full GCs':>8} {'longest ms':>11} {'total ms':>9}"
        f" {'any GC max ms':>14} {'settle max ms':>14} {'settles ms':>11}"
    )
    for variant in ("cpython", "settled"):
        argv = [sys.executable, "-m", "benchmarks.bench_gc_pause", "--child", variant]
        argv += ["--jobs", str(args.jobs), "--polls", str(args.polls)]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        figures = json.loads(out.splitlines()[-1])
        for phase in ("seed", "polls", "rebuild"):
            f = figures[phase]
            print(
                f"{variant:<10} {phase:<8} {f['full']:>8.0f} {f['longest_ms']:>11.1f} {f['total_ms']:>9.1f}"
                f" {f['longest_any_ms']:>14.1f} {f['settle_longest_ms']:>14.1f} {f['settle_total_ms']:>11.1f}"
            )
    print(f"history keys: {figures['keys']['live']:,}")


if __name__ == "__main__":
    main()
