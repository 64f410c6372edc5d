"""How far a shortened job's time limit is extended while it runs (time_min and extend modes).

The scheduler plans with the prediction; the job is never killed before its user's own limit
("divorce the kill time from the prediction", Tsafrir, Etsion & Feitelson 2007). When a running
job's remaining time falls below the guard's lead time, its limit moves to

- ``conditional``: prediction x the QUANTILE of run time / prediction among the site's ended jobs
  that outlived the same multiple of their prediction (ConditionalRatios), where at least MIN_TAIL
  such jobs exist; otherwise, and with ``steps``:
- the first of prediction + step, step in STEPS (Tsafrir's correction offsets),

at least the lead time from now, capped at the user's own request and at any bound the site sets (a
reservation on its nodes, a partition, QOS or association maximum). Tsafrir's steps grow roughly
geometrically and are offsets from the ORIGINAL prediction, so an early extension stays small; the
conditional quantile asks the site's own jobs how far a job that got this far usually goes, which
planned better than the steps on the traces simulated (docs/simulation.md has where and by how much).

Pure functions in minutes and seconds: `harp guard` (guard/) applies `next_limit` to live jobs, the
simulator (simulation/limits.py) the same `next_limit` to replayed ones, with ratios over the same
WINDOW_DAYS; the evaluation counts extensions with the steps alone (`extensions_needed`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.core.tag import TAG_KEY, Tag, parse_tag

# The guard's default lead (config [guard] lead_seconds): the poll period, slurmctld's periodic limit
# check (about 30 s) and a slow scontrol, with room to spare.
DEFAULT_LEAD_S = 120.0
# Tsafrir et al. (2007): 1, 5, 15, 30 minutes, 1, 2, 5, 10, 20, 50, 100 hours after the prediction.
STEPS_MINUTES: tuple[int, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 3000, 6000)
EXTENSIONS = ("conditional", "steps")
# The conditional extension learns from the jobs that ended in the last this many days.
WINDOW_DAYS = 30
# A job timed out this close to its own limit was stopped by that limit, not by harp's.
OWN_LIMIT_SLACK_S = 60


class ConditionalRatios:
    """Run time / prediction of ended jobs, in log-spaced bins, for the conditional extension: given
    that a job has outlived ``r`` times its prediction, the ``QUANTILE`` of the ratios above ``r``.
    Bins, not a sorted list: a 100 k-job trace adds 100 k ratios."""

    QUANTILE = 0.8
    MIN_TAIL = 20  # fewer ended jobs above the ratio than this: no estimate (Tsafrir's step is used)
    BINS_PER_DECADE = 40
    DECADES = 4  # ratios from 1 to 10,000; below 1 nothing is asked, above goes in the last bin
    # Ended jobs in a window: a site ending a million a day holds 3e7 in 30 days. A saved file of
    # more is not one harp wrote, and counts past sys.maxsize break len() and float().
    MAX_JOBS = 10**9

    def __init__(self, ratios: Iterable[float] = ()) -> None:
        self._counts = [0] * (self.BINS_PER_DECADE * self.DECADES + 1)
        for ratio in ratios:
            self.add(ratio)

    @classmethod
    def from_counts(cls, counts: object) -> ConditionalRatios:
        """The ratios whose ``counts`` were saved; ValueError for anything else."""
        ratios = cls()
        if (
            not isinstance(counts, list)
            or len(counts) != len(ratios._counts)
            or not all(type(c) is int and 0 <= c <= cls.MAX_JOBS for c in counts)
            or sum(counts) > cls.MAX_JOBS
        ):
            raise ValueError(
                f"counts must be {len(ratios._counts)} non-negative integers totalling at most {cls.MAX_JOBS}"
            )
        ratios._counts = list(counts)
        return ratios

    @property
    def counts(self) -> list[int]:
        return list(self._counts)

    def __len__(self) -> int:
        return sum(self._counts)

    def _bin(self, ratio: float) -> int:
        if ratio <= 1.0:
            return 0
        return min(len(self._counts) - 1, 1 + int(math.log10(ratio) * self.BINS_PER_DECADE))

    def _upper(self, index: int) -> float:
        return float(10 ** (index / self.BINS_PER_DECADE))

    def add(self, ratio: float) -> None:
        self._counts[self._bin(ratio)] += 1

    def remove(self, ratio: float) -> None:
        """Forget one ``ratio`` added before (a job leaving the window)."""
        self._counts[self._bin(ratio)] -= 1

    def quantile_above(self, ratio: float) -> float | None:
        first = self._bin(ratio) + 1
        tail = sum(self._counts[first:])
        if tail < self.MIN_TAIL:
            return None
        need, seen = self.QUANTILE * tail, 0
        for index in range(first, len(self._counts)):
            seen += self._counts[index]
            if seen >= need:
                return self._upper(index)
        return self._upper(len(self._counts) - 1)


def observed_ratio(record: JobRecord) -> float | None:
    """Run time / harp's time value for an ended job whose tag put that value below the user's own
    limit, the jobs ConditionalRatios learns from; None for any other job. A job killed at a limit
    harp lowered (rewrite mode) is left out: its run time is only a lower bound, and would pull the
    quantile down to the very limit that killed it."""
    tag = parse_tag(record.harp_tag)
    if tag is None or (value := tag.values.get("t")) is None or value <= 0:
        return None
    own = tag.own.get("t", record.request.time_limit_minutes)
    if own is None or own <= value or killed_before_own_limit(record, own):
        return None
    return record.elapsed_s / (value * 60.0)


def killed_before_own_limit(record: JobRecord, own_minutes: int | None) -> bool:
    """Timed out before the user's own limit (where known): at a limit harp lowered."""
    if record.state != "TIMEOUT":
        return False
    return own_minutes is None or record.elapsed_s < own_minutes * 60 - OWN_LIMIT_SLACK_S


def stopped_at_harps_limit(record: JobRecord, tag: Tag, target: Target) -> bool:
    """Whether harp's doing stopped ``record`` (``tag`` its harp tag): it timed out before the tag's
    ``t0`` with its time limit lowered (``t!``) or its time_min set (``t~``: Slurm's backfill may
    start such a job with a limit cut down toward its time_min, and only the guard extends it back
    to its user's own), or ran out of memory with its memory lowered (``m!``). A job that timed out
    before harp's value itself was stopped by a limit neither harp nor backfill set (its user or an
    admin lowered it with `scontrol update`): not harp's. The one rule of harp's kills: the outcome
    metrics, `harp report`, and the calibration's (learning.targets), which read a record whose
    limit is its user's own (as_submitted), so the run time tells, not the limit it ran under."""
    flag = tag.flags.get(TAG_KEY[target])
    if target is Target.TIME:
        value = tag.values.get("t")
        return (
            flag in ("!", "~")
            and killed_before_own_limit(record, tag.own.get("t"))
            and (value is None or record.elapsed_s >= value * 60 - OWN_LIMIT_SLACK_S)
        )
    return target is Target.MEMORY and flag == "!" and record.state == "OUT_OF_MEMORY"


def stopped_by_harp(record: JobRecord, target: Target) -> bool:
    """stopped_at_harps_limit for ``record`` (as_submitted) under its own harp tag; False without one."""
    tag = parse_tag(record.harp_tag) if record.harp_tag else None
    return tag is not None and stopped_at_harps_limit(record, tag, target)


@dataclass(frozen=True, slots=True)
class Extension:
    """A new limit for one job (minutes), and whether a site bound stopped it short of the step."""

    new_limit: int
    capped_by_bound: bool = False
    conditional: bool = False  # from the site's ended jobs (ConditionalRatios), not a step

    def reaches(self, request_minutes: int) -> bool:
        return self.new_limit >= request_minutes


def due(limit_minutes: int, elapsed_s: float, lead_s: float) -> bool:
    """Whether a job with ``limit_minutes`` that has run ``elapsed_s`` must be extended now."""
    return limit_minutes * 60.0 - elapsed_s <= lead_s


def next_limit(
    prediction_minutes: int,
    limit_minutes: int,
    request_minutes: int,
    elapsed_s: float,
    lead_s: float,
    bound_minutes: int | None = None,
    steps: tuple[int, ...] = STEPS_MINUTES,
    ratios: ConditionalRatios | None = None,
) -> Extension | None:
    """The limit a job should have now, or None when it needs no extension or none is possible.

    ``prediction_minutes``: the limit harp first gave the job (the extend mode's limit, or the
    time_min it was started with); ``limit_minutes``: its current limit; ``request_minutes``: the
    user's own limit, never exceeded; ``bound_minutes``: the largest limit the site allows now
    (None: no bound); ``ratios``: the site's ended jobs for the conditional extension (None: steps
    only). A job already at or above its request is left alone.
    """
    if limit_minutes >= request_minutes or not due(limit_minutes, elapsed_s, lead_s):
        return None
    return _step(
        prediction_minutes, limit_minutes, request_minutes, elapsed_s, lead_s, bound_minutes, steps, ratios
    )


def _step(
    prediction_minutes: int,
    limit_minutes: int,
    request_minutes: int,
    elapsed_s: float,
    lead_s: float,
    bound_minutes: int | None,
    steps: tuple[int, ...],
    ratios: ConditionalRatios | None,
) -> Extension | None:
    # At least the lead time from now, and more than the job has.
    least = max(math.ceil((elapsed_s + lead_s) / 60.0), limit_minutes + 1)
    quantile = None if ratios is None else ratios.quantile_above(limit_minutes / max(prediction_minutes, 1))
    if quantile is not None:
        target = max(least, math.ceil(prediction_minutes * quantile))
    else:
        target = next(
            (prediction_minutes + s for s in steps if prediction_minutes + s >= least), request_minutes
        )
    target = min(target, request_minutes)
    capped = bound_minutes is not None and target > bound_minutes
    if capped:
        target = bound_minutes  # type: ignore[assignment]
    if target <= limit_minutes:
        return None if not capped else Extension(limit_minutes, capped_by_bound=True)
    return Extension(target, capped_by_bound=capped, conditional=quantile is not None)


def extensions_needed(
    prediction_minutes: int,
    run_s: float,
    request_minutes: int,
    lead_s: float,
    steps: tuple[int, ...] = STEPS_MINUTES,
    ratios: ConditionalRatios | None = None,
) -> tuple[int, int]:
    """(extensions, final limit in minutes) for a job of run time ``run_s`` started with limit
    ``prediction_minutes`` and extended by ``next_limit`` whenever it falls due, with no site bound:
    what the evaluation and the simulator count. A job needing more than its request is stopped
    at the request, as it would have been without harp."""
    limit, count = min(prediction_minutes, request_minutes), 0
    while limit < request_minutes and limit * 60.0 - lead_s <= run_s:
        # The guard acts when the remaining time falls below the lead: at elapsed = limit - lead.
        elapsed = max(0.0, limit * 60.0 - lead_s)
        step = _step(prediction_minutes, limit, request_minutes, elapsed, lead_s, None, steps, ratios)
        if step is None:
            break
        limit, count = step.new_limit, count + 1
    return count, limit
