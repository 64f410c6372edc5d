"""Walltime limits along a whole trace, served as nightly retraining would serve them.

`harp evaluate` fits once, when its test window opens. A replay of the schedule (`harp simulate`)
needs a limit for every job the way a site running slurm-harp would have had it: at the start of each
period (``period_days``), ours is fitted as `harp train` fits it on the jobs that had ENDED by then
(the older 80 % train, the most recent 20 % choose and calibrate, then every known job refits the
models), and that fit serves the jobs submitted during the period. The first ``first_fraction`` of
the trace only trains: its jobs keep their requests. No job's limit sees a job that ended after its
submission (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.evaluation.ours import HarpStrategy
from slurm_harp.evaluation.strategy import Split

DAY_S = 86400
# As `harp train`: the older 80 % of the known jobs train, the most recent 20 % validate.
TRAIN_SHARE = 0.8


@dataclass(frozen=True)
class Served:
    """Per job of the input list (same order): ``rule`` the calibrated rule's limit and ``quantile``
    the quantile model's prediction (policy.limits = "quantile"), in minutes, capped at the request;
    NaN keeps the request (and for every job before the first fit); ``cold``: the jobs whose user
    had no job ended within the history horizon (HarpStrategy.cold). ``fits``: how many fits served
    the trace."""

    rule: np.ndarray
    quantile: np.ndarray
    cold: np.ndarray
    fits: int


def period_starts(jobs: Sequence[JobRecord], period_days: float, first_fraction: float) -> list[int]:
    """The first job of each period (jobs in submit order) after the training-only head, and len(jobs)."""
    n = len(jobs)
    first = max(1, math.ceil(n * first_fraction))
    if first >= n:
        return [n]
    starts, t = [first], float(jobs[first].request.submit_time or 0)
    for i in range(first + 1, n):
        submit = float(jobs[i].request.submit_time or 0)
        if submit >= t + period_days * DAY_S:
            starts.append(i)
            t = submit
    return [*starts, n]


def served_limits(
    jobs: Sequence[JobRecord],
    *,
    period_days: float = 30.0,
    first_fraction: float = 0.2,
    kill_budget: float = 0.01,
    make: Callable[[], HarpStrategy] = lambda: HarpStrategy(Target.TIME),
    progress: Callable[[int, int], None] | None = None,
    quantile: float = 0.5,
) -> Served:
    """Limits for ``jobs`` (in submit order, as chronological_split keeps them) from fits renewed
    every ``period_days``; ``progress(done, total)`` is told after each fit."""
    n = len(jobs)
    rule, by_quantile = np.full(n, np.nan), np.full(n, np.nan)
    bounds = period_starts(jobs, period_days, first_fraction)
    total = len(bounds) - 1
    first_strategy = strategy = make()
    cold = strategy.cold(jobs)
    for k, (first, end) in enumerate(pairwise(bounds)):
        if k:  # a fresh fit per period, on the features built once
            strategy = make()
            strategy.share_features(first_strategy)
        try:
            strategy.fit(jobs, Split(int(TRAIN_SHARE * first), first), kill_budget, known_only=True)
        except ValueError:
            pass  # too few jobs known yet: this period keeps the requests
        else:
            rule[first:end] = strategy.limits(jobs, first)[: end - first]
            by_quantile[first:end] = strategy.quantile_limits(jobs, first, quantile)[: end - first]
        if progress is not None:
            progress(k + 1, total)
    return Served(rule=rule, quantile=by_quantile, cold=cold, fits=total)
