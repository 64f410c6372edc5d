"""Benchmark: causal history features for training (1 M jobs) and serving (one row).

    .venv/bin/python -m benchmarks.bench_features [--jobs 1000000] [--sample 20000] [--dataset]

The KTH-SP2 trace (28 k jobs) is extended by time-shifted copies (same users, each copy after the
previous one ends) to ``--jobs``. Prints, measured in the same run:
- history_matrix over all jobs: wall and CPU seconds, peak RSS before and during the sweep;
- baseline: a direct O(n·K) reading of the definitions (per key, the jobs ended in the horizon
  found by bisection, the last K re-summarised for every row) on the first ``--sample`` jobs,
  checked equal to history_matrix on the same jobs, and the time ratio;
- serving: HistoryIndex.row per request (µs) on an index fed the last 30 days, vectorize of one
  request with and without history (the request-only vectorize is the pre-history cost);
- with --dataset: build_dataset (request features + history, what `harp train` runs) on all jobs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from slurm_harp.accounting.swf import read_swf
from slurm_harp.core.features import vectorize
from slurm_harp.core.history import HORIZON_DAYS, HistoryIndex, history_matrix
from slurm_harp.core.job import JobRecord
from tests.conftest import BUNDLED_TRACE, SHARED_TRACES
from tests.history_reference import direct_matrix

DAY = 86400


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


def reset_peak() -> None:
    """Make VmHWM start again from the current RSS (Linux >= 4.0), to see one step's peak."""
    Path("/proc/self/clear_refs").write_text("5")


def extended_trace(jobs: int) -> list[JobRecord]:
    path = SHARED_TRACES / "KTH-SP2-1996-2.1-cln.swf.gz"
    base = read_swf(path if path.exists() else BUNDLED_TRACE)
    start = min(r.request.submit_time or 0 for r in base)
    span = max(r.end_time or 0 for r in base) - start + DAY
    out: list[JobRecord] = []
    copy = 0
    while len(out) < jobs:
        shift = copy * span
        for r in base[: jobs - len(out)]:
            request = dataclasses.replace(r.request, submit_time=(r.request.submit_time or 0) + shift)
            out.append(
                dataclasses.replace(
                    r,
                    job_id=f"{copy}.{r.job_id}",
                    request=request,
                    start_time=None if r.start_time is None else r.start_time + shift,
                    end_time=None if r.end_time is None else r.end_time + shift,
                )
            )
        copy += 1
    return out


def timed(fn: Callable[[], object]) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def per_call_us(fn: Callable[[int], object], n: int) -> float:
    fn(0)
    started = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=20_000)
    parser.add_argument("--dataset", action="store_true", help="also time build_dataset on all jobs")
    args = parser.parse_args()

    records = extended_trace(args.jobs)
    records.sort(key=lambda r: r.request.submit_time or 0)
    print(
        f"{len(records)} jobs (KTH-SP2 + time-shifted copies); RSS with the records loaded {rss_mb():.0f} MB"
    )

    before = rss_mb()
    reset_peak()
    matrix, wall, cpu = timed(lambda: history_matrix(records))
    assert isinstance(matrix, np.ndarray)
    peak = rss_mb("VmHWM")
    print(
        f"history_matrix: {wall:.1f} s wall, {cpu:.1f} s CPU ({cpu / len(records) * 1e6:.1f} µs/job); "
        f"peak RSS {peak:.0f} MB (+{peak - before:.0f} MB over the loaded records)"
    )

    sample = records[: args.sample]
    ours, _, ours_cpu = timed(lambda: history_matrix(sample))
    direct, _, direct_cpu = timed(lambda: direct_matrix(sample))
    assert isinstance(ours, np.ndarray) and isinstance(direct, np.ndarray)
    np.testing.assert_allclose(ours, direct, rtol=0, atol=1.5 / 1024)
    print(
        f"baseline on {len(sample)} jobs: direct O(n·K) {direct_cpu:.2f} s CPU vs history_matrix "
        f"{ours_cpu:.2f} s: ratio {direct_cpu / ours_cpu:.2f}x (same values)"
    )

    at = max(r.end_time or 0 for r in records)
    index = HistoryIndex()
    for r in sorted(
        (r for r in records if (r.end_time or 0) >= at - HORIZON_DAYS * DAY), key=lambda r: r.end_time or 0
    ):
        index.add(r)
    probes = [r.request for r in records[-2000:]]
    row_us = per_call_us(lambda i: index.row(probes[i % len(probes)], at), 20_000)
    hist = index.row(probes[0], at)[np.newaxis, :]
    with_us = per_call_us(lambda i: vectorize([probes[i % len(probes)]], hist), 20_000)
    without_us = per_call_us(lambda i: vectorize([probes[i % len(probes)]]), 20_000)
    print(
        f"serving: HistoryIndex.row {row_us:.1f} µs ({len(index)} keys, {index.added} jobs in the last "
        f"{HORIZON_DAYS} days); vectorize one request {with_us:.1f} µs with history, "
        f"{without_us:.1f} µs request-only (baseline); total {row_us + with_us:.1f} µs vs {without_us:.1f} µs"
    )

    if args.dataset:
        from slurm_harp.learning.dataset import build_dataset

        del matrix
        before = rss_mb()
        reset_peak()
        data, wall, cpu = timed(lambda: build_dataset(records))
        peak = rss_mb("VmHWM")
        print(
            f"build_dataset: {wall:.1f} s wall, {cpu:.1f} s CPU; "
            f"peak RSS {peak:.0f} MB (+{peak - before:.0f} MB)"
        )
        del data


if __name__ == "__main__":
    main()
