"""Columns a study appends to ours' feature rows: ideas tried as features and not adopted
(tests/bench/study_method's burst and request-history variants; docs/evaluation/tried.md).

Each builder takes the usable records in submit order (learning.targets.usable_in_order) and
returns one row per record, computed from what was known at its submit time.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from unittest.mock import patch

import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.core.history import user_key
from slurm_harp.core.key_history import KeyHistory, horizon_start, log_count, outcome_of, rounded
from slurm_harp.learning import dataset, strategy


def burst_columns(usable: Sequence[JobRecord]) -> np.ndarray:
    """(n, 4) submission-burst features of records in submit order, each from earlier submissions
    (and, for the last one, the end times of the user's earlier jobs, as history features are)."""
    out = np.full((len(usable), 4), np.nan, dtype=np.float32)
    last_submit: dict[tuple[str, str], float] = {}
    by_user: defaultdict[str, deque[float]] = defaultdict(deque)
    by_name: defaultdict[tuple[str, str], deque[float]] = defaultdict(deque)
    running: defaultdict[str, list[float]] = defaultdict(list)  # end times of submitted jobs
    for i, record in enumerate(usable):
        t = record.request.submit_time
        if t is None:
            continue
        user = user_key(record.request) or ""
        name = (user, record.request.job_name or "")
        if name in last_submit:
            out[i, 0] = math.log1p(max(0.0, t - last_submit[name]))
        last_submit[name] = t
        for column, recent in ((1, by_user[user]), (2, by_name[name])):
            while recent and recent[0] < t - 3600:
                recent.popleft()
            out[i, column] = math.log1p(len(recent))
            recent.append(t)
        ends = running[user] = [end for end in running[user] if end > t]
        out[i, 3] = math.log1p(len(ends))
        if record.end_time is not None:
            ends.append(record.end_time)
    return out


def request_history_columns(usable: Sequence[JobRecord]) -> np.ndarray:
    """(n, 6) history of the same user + requested time limit, of records in submit order: each
    row from the jobs that ended at or before its submit time (KeyHistory, as the product's keys)."""
    out = np.full((len(usable), 6), np.nan, dtype=np.float32)
    keys: dict[tuple[str, int], KeyHistory] = {}

    def key(record: JobRecord) -> tuple[str, int] | None:
        user, limit = user_key(record.request), record.request.time_limit_minutes
        return None if user is None or limit is None else (user, limit)

    by_end = sorted((r for r in usable if r.end_time is not None), key=lambda r: r.end_time or 0)
    pending = 0
    for i, record in enumerate(usable):
        at = record.request.submit_time
        if at is None:
            continue
        while pending < len(by_end) and (by_end[pending].end_time or 0) <= at:
            ended, outcome = by_end[pending], outcome_of(by_end[pending])
            pending += 1
            name = key(ended)
            if name is not None and outcome is not None:
                keys.setdefault(name, KeyHistory()).add(outcome)
        name = key(record)
        if name is None:
            continue
        history = keys.get(name)
        count, s = (0, None) if history is None else history.values(at, horizon_start(at))
        out[i, 0] = log_count(count)
        if s is not None:
            headroom = rounded(math.log1p(name[1] * 60.0) - s[3])  # on the history's grid
            out[i, 1:] = (s[0], s[2], s[3], s[6], headroom)
    return out


@contextmanager
def appended_columns(columns: Callable[[Sequence[JobRecord]], np.ndarray]) -> Iterator[None]:
    """HarpStrategy's datasets with ``columns`` of their usable records appended, for the duration."""
    plain = dataset.build_dataset  # what learning.strategy imported

    def build(records: Sequence[JobRecord], max_rows: int | None = None) -> dataset.Dataset:
        data = plain(records, max_rows)
        usable = sorted(
            (r for r in records if r.elapsed_s > 0),
            key=lambda r: -math.inf if r.request.submit_time is None else r.request.submit_time,
        )
        extra = columns(usable)[-len(data) :]
        return replace(data, x=np.hstack([data.x, extra]))

    with patch.object(strategy, "build_dataset", build):  # a study's hook into a private import
        yield
