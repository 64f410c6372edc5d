"""Benchmark: causal history features for training (1 M jobs) and serving (one row).

    .venv/bin/python -m tests.bench.bench_features [--jobs 1000000] [--sample 20000] [--dataset]

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
import bisect
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.accounting.swf import read_swf
from slurm_harp.core.features import vectorize
from slurm_harp.core.history import HISTORY_FEATURE_NAMES, HORIZON_DAYS, HistoryIndex, K, history_matrix
from slurm_harp.core.request import JobRequest
from tests.conftest import BUNDLED_TRACE, SHARED_TRACES

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


def _user(r: JobRequest) -> str | None:
    return r.user_name if r.user_name is not None else None if r.user_id is None else str(r.user_id)


def _keys(r: JobRequest) -> list[tuple[str, ...] | None]:
    user = _user(r)
    return [
        None if user is None else ("u", user),
        None if user is None or r.job_name is None else ("n", user, r.job_name),
        None if r.account is None else ("a", r.account),
        None if user is None or r.script_signature is None else ("s", user, r.script_signature),
    ]


def order(r: JobRecord) -> tuple[object, ...]:
    """The documented order of ended jobs: end time, then every other field (unknown = -1)."""
    limit, mem, cpu = r.request.time_limit_minutes, r.max_rss_mb, r.total_cpu_s
    return (
        r.end_time,
        r.job_id,
        -1 if r.request.submit_time is None else r.request.submit_time,
        float(r.elapsed_s),
        r.elapsed_s / (limit * 60) if limit else -1.0,
        float(r.censored),
        math.log1p(mem) if mem is not None and mem >= 0 else -1.0,
        math.log1p(cpu / r.elapsed_s) if cpu is not None and cpu >= 0 else -1.0,
    )


def direct_matrix(records: Sequence[JobRecord]) -> np.ndarray:
    """The baseline: every row re-derived from the last K jobs of each key (all jobs known upfront)."""
    groups: dict[tuple[str, ...], list[JobRecord]] = {}
    for r in records:
        end, submit = r.end_time, r.request.submit_time
        if end is None or r.elapsed_s <= 0 or (submit is not None and end <= submit):
            continue
        for key in _keys(r.request):
            if key is not None:
                groups.setdefault(key, []).append(r)
    ends: dict[tuple[str, ...], list[int]] = {}
    for key, group in groups.items():
        group.sort(key=order)
        ends[key] = [r.end_time or 0 for r in group]
    out = np.full((len(records), len(HISTORY_FEATURE_NAMES)), np.nan)
    for i, r in enumerate(records):
        at = r.request.submit_time
        if at is None:
            continue
        first = (at // DAY - HORIZON_DAYS + 1) * DAY
        blocks: list[tuple[int, list[JobRecord]] | None] = []
        for key in _keys(r.request):
            if key is None:
                blocks.append(None)
                continue
            e = ends.get(key, [])
            lo, hi = bisect.bisect_left(e, first), bisect.bisect_right(e, at)
            blocks.append((hi - lo, groups[key][max(lo, hi - K) : hi] if hi > lo else []))
        out[i] = _row(blocks, at)
    return out


def _q(v: float) -> float:
    return v if math.isnan(v) else round(v * 1024) / 1024


def _block(b: tuple[int, list[JobRecord]] | None, at: int) -> list[float]:
    if b is None:
        return [math.nan] * 9
    count, last = b
    if not last:
        return [_q(math.log1p(count))] + [math.nan] * 8
    runs = [float(r.elapsed_s) for r in last]
    ratios = [
        r.elapsed_s / (r.request.time_limit_minutes * 60) if r.request.time_limit_minutes else -1.0
        for r in last
    ]
    known = [x for x in ratios if x >= 0]
    return [
        _q(math.log1p(count)), _q(math.log1p(runs[-1])), _q(math.log1p(sum(runs[-2:]) / len(runs[-2:]))),
        _q(math.log1p(statistics.median(runs))), _q(math.log1p(max(runs))),
        _q(ratios[-1]) if ratios[-1] >= 0 else math.nan, _q(statistics.median(known)) if known else math.nan,
        _q(sum(r.censored for r in last) / len(last)), _q(math.log1p(at - (last[-1].end_time or 0))),
    ]  # fmt: skip


def _last(b: tuple[int, list[JobRecord]] | None, kind: str, pick: Callable[[list[float]], float]) -> float:
    values = []
    for r in b[1] if b else []:
        if kind == "mem" and r.max_rss_mb is not None and r.max_rss_mb >= 0:
            values.append(math.log1p(r.max_rss_mb))
        if kind == "cpus" and r.total_cpu_s is not None and r.total_cpu_s >= 0:
            values.append(math.log1p(r.total_cpu_s / r.elapsed_s))
    return _q(pick(values)) if values else math.nan


def _row(blocks: list[tuple[int, list[JobRecord]] | None], at: int) -> list[float]:
    u, n, a, s = (_block(b, at) for b in blocks)
    last: Callable[[list[float]], float] = lambda v: v[-1]  # noqa: E731
    return [
        *u, *n, a[0], a[3], a[6], s[0], s[1], s[3],
        _last(blocks[1], "mem", last), _last(blocks[1], "mem", max), _last(blocks[0], "mem", last),
        _last(blocks[1], "cpus", last), _last(blocks[0], "cpus", last),
    ]  # fmt: skip


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
