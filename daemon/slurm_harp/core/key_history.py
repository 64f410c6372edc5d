"""One key's history (a user, user+job name, account or user+script signature): its last K
ended jobs, in a total order, and per-day counts of ended jobs within the horizon.

The state depends only on the set of jobs added, never on the order of adds, given that every
query comes at or after every added end (the daemon's case; training's sweep makes it so). Stats
are rounded to multiples of 1/1024 (0.1 % in log space): exact in float32, and so are the midpoints
trees split at. Unrounded, log seconds 1 s apart are 1 float32 ulp apart, and an ONNX tree (float32
thresholds) then sends a row the other way than LightGBM (float64) does.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from slurm_harp.core.job import JobRecord
from slurm_harp.core.tag import as_submitted

K = 8
HORIZON_DAYS = 30
DAY_S = 86400
_NAN = math.nan
_UNKNOWN = -1.0
_Q = 1024.0

# One ended job: (end, job_id, submit or -1, elapsed_s, run/request ratio, censored 0/1,
# log1p peak MB, log1p effective CPUs), unknowns as -1.0 (known values are >= 0): no NaN inside,
# so tuples compare as a total order and the ring does not depend on the order of adds.
Outcome = tuple[int, str, int, float, float, float, float, float]
# Derived from a ring: log last, log mean2, log median, log max, last ratio, median ratio,
# limit fraction, last mem, max mem, last cpus (all rounded), last end.
Stats = tuple[float, float, float, float, float, float, float, float, float, float, int]


def outcome_of(record: JobRecord) -> Outcome | None:
    """What the index keeps of a finished job, or None when it cannot count as history."""
    end, submit, elapsed = record.end_time, record.request.submit_time, record.elapsed_s
    if end is None or elapsed <= 0 or (submit is not None and end <= submit):
        return None
    # The user's own limit, as the daemon saw it at submission: not the one harp set or the guard
    # extended the job to, which accounting shows (training and serving read the same).
    limit = as_submitted(record).request.time_limit_minutes
    mem = record.max_rss_mb
    cpu = record.total_cpu_s
    return (
        int(end),
        record.job_id,
        -1 if submit is None else int(submit),
        float(elapsed),
        elapsed / (limit * 60.0) if limit is not None and limit > 0 else _UNKNOWN,
        1.0 if record.censored else 0.0,
        math.log1p(mem) if mem is not None and mem >= 0 else _UNKNOWN,
        math.log1p(cpu / elapsed) if cpu is not None and cpu >= 0 else _UNKNOWN,
    )


def rounded(value: float) -> float:
    """``value`` on the 1/1024 grid (NaN stays NaN)."""
    return round(value * _Q) / _Q if value == value else value


_LOG_COUNTS = [rounded(math.log1p(n)) for n in range(1024)]


def log_count(n: int) -> float:
    """log1p(n), rounded; small counts from a table (this runs for every key of every row)."""
    return _LOG_COUNTS[n] if n < 1024 else rounded(math.log1p(n))


def horizon_start(at: int) -> int:
    """The first second whose ended jobs still count at unix time ``at``: the UTC midnight
    HORIZON_DAYS - 1 days before ``at``'s day (``KeyHistory.values``' ``first_s``)."""
    return (at // DAY_S - HORIZON_DAYS + 1) * DAY_S


def _median(values: list[float]) -> float:
    values.sort()
    n = len(values)
    if n == 0:
        return _NAN
    half = n // 2
    return values[half] if n % 2 else (values[half - 1] + values[half]) / 2.0


def _last_known(ring: Sequence[Outcome], field: int) -> float:
    for outcome in reversed(ring):
        value = float(outcome[field])
        if value >= 0.0:
            return value
    return _NAN


def stats_of(ring: Sequence[Outcome]) -> Stats:
    log1p, q = math.log1p, _Q
    last = ring[-1]
    mean2 = (last[3] + ring[-2][3]) / 2.0 if len(ring) > 1 else last[3]
    runs = sorted([o[3] for o in ring])
    mems = [o[6] for o in ring if o[6] >= 0.0]
    return (
        round(log1p(last[3]) * q) / q,
        round(log1p(mean2) * q) / q,
        round(log1p(_median(runs)) * q) / q,
        round(log1p(runs[-1]) * q) / q,
        round(last[4] * q) / q if last[4] >= 0.0 else _NAN,
        rounded(_median([o[4] for o in ring if o[4] >= 0.0])),
        round(sum([o[5] for o in ring]) / len(ring) * q) / q,
        rounded(_last_known(ring, 6)),
        round(max(mems) * q) / q if mems else _NAN,
        rounded(_last_known(ring, 7)),
        last[0],
    )


class KeyHistory:
    """One key's recent outcomes. ``days`` counts ended jobs per UTC day within the horizon."""

    __slots__ = ("days", "last_day", "ring", "stats", "total")

    def __init__(self) -> None:
        self.ring: list[Outcome] = []
        self.days: dict[int, int] = {}
        self.total = 0
        self.last_day = -(2**62)
        self.stats: Stats | None = None  # of the whole ring, cached until the next add

    def add(self, outcome: Outcome) -> None:
        day = outcome[0] // DAY_S
        if day > self.last_day:
            self.last_day = day
            first = day - HORIZON_DAYS + 1
            # Queries come at or after every added end, so older days can never count again.
            for old in [d for d in self.days if d < first]:
                self.total -= self.days.pop(old)
            while self.ring and self.ring[0][0] < first * DAY_S:
                del self.ring[0]
        elif day <= self.last_day - HORIZON_DAYS:
            return  # already outside the horizon of every later query
        self.days[day] = self.days.get(day, 0) + 1
        self.total += 1
        ring = self.ring
        if len(ring) < K or outcome > ring[0]:
            bisect.insort(ring, outcome)
            if len(ring) > K:
                del ring[0]
            self.stats = None

    def values(self, at: int, first_s: int) -> tuple[int, Stats | None]:
        """(jobs ended in [first_s, at], stats of the ring's entries in that interval)."""
        first_day = first_s // DAY_S
        if self.last_day - HORIZON_DAYS + 1 >= first_day:
            count = self.total
        else:
            count = sum(n for d, n in self.days.items() if d >= first_day)
        ring = self.ring
        if not ring or ring[-1][0] < first_s:
            return count, None
        if ring[0][0] >= first_s and ring[-1][0] <= at:
            if self.stats is None:
                self.stats = stats_of(ring)
            return count, self.stats
        valid = [o for o in ring if first_s <= o[0] <= at]
        return count, stats_of(valid) if valid else None
