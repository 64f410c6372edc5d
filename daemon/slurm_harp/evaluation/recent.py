"""Causal per-user history: what a user's jobs that had already ENDED looked like at a submit time.

One sweep over the jobs in submit order with a heap of end events, O(n log n): before job i is
looked at, every job that had ended by i's submit time (core.job.ended_by) is released into its
user's window of the most recently ended values. A job still running at i's submit time (or one
without an end time) is never visible to i.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from slurm_harp.core.job import JobRecord, ended_by


def recent_mean(jobs: Sequence[JobRecord], values: np.ndarray, depth: int = 2) -> np.ndarray:
    """Per job, the mean of ``values`` over its user's last ``depth`` jobs (by end time) that had
    ended by its submit time, at or before it (core.job.ended_by); NaN when the user has none (or
    is unknown).

    ``values`` is aligned with ``jobs``; a job with a NaN value never enters any history.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    n = len(jobs)
    if values.shape != (n,):
        raise ValueError(f"values has shape {values.shape}, jobs {n}")
    submit = [math.inf if j.request.submit_time is None else float(j.request.submit_time) for j in jobs]
    users = [j.request.user_key for j in jobs]
    order = sorted(range(n), key=submit.__getitem__)
    pending: list[tuple[float, int, str]] = []  # (end time, job index, user): jobs not yet ended
    windows: dict[str, deque[float]] = {}
    out = np.full(n, math.nan)
    for i in order:
        now = submit[i]
        while pending and ended_by(pending[0][0], now):
            _, j, owner = heapq.heappop(pending)
            window = windows.get(owner)
            if window is None:
                window = windows[owner] = deque(maxlen=depth)
            window.append(float(values[j]))
        key = users[i]
        if key is None:
            continue
        seen = windows.get(key)
        if seen:
            out[i] = sum(seen) / len(seen)
        end = jobs[i].end_time
        if end is not None and math.isfinite(values[i]):
            heapq.heappush(pending, (float(end), i, key))
    return out
