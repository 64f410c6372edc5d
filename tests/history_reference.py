"""A direct O(n·K) reading of the history features' definitions (core/history.py), for checking
history_matrix against (tests/unit/test_history.py) and timing it (benchmarks/bench_features.py):
per key, the jobs ended within the horizon found by bisection, the last K re-summarised for every
row, all jobs known upfront. Written apart from the product on purpose: it shares none of its code."""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from slurm_harp.core.history import HISTORY_FEATURE_NAMES, HORIZON_DAYS, K
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

DAY = 86400


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
