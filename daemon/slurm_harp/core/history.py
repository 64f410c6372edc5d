"""Causal job history: what the recently ENDED jobs of the same user, user+job name, account and
user+script signature did. One implementation serves training and the daemon, so a live prediction
sees exactly the features the model was trained on:

- training: ``history_matrix(records)`` sweeps jobs in submit order and, before each job's row, adds
  every job that had ended at or before its submit time (end events sorted once: O(n log n));
- serving: the daemon ``add``s finished jobs as they reach the job store and asks ``row(request, at)``.

Every value depends only on the SET of jobs added (not on the order of adds) and on ``at``: each key
keeps its last K outcomes ordered by (end time, job id, ...) and a per-day count of ended jobs. Only
jobs whose end day is within the last HORIZON_DAYS UTC days of ``at`` (and end <= at) count, so the
daemon, seeded with that many days from the store, reproduces training's values exactly; older keys
are forgotten. A job counts once it has elapsed > 0 and a known end time after its submit time.

Features, in HISTORY_FEATURE_NAMES order (prefix h30d_ = the 30-day horizon), for key = user, then
user+job name ("name"):
  log_jobs        log1p(number of jobs ended within the horizon); 0 = none, NaN = key not given
  log_last_s      log1p(elapsed s of the most recently ended job)
  log_mean2_s     log1p(mean elapsed of the last two: Tsafrir et al.'s predictor; one job: itself)
  log_median_s    log1p(median elapsed of the last K)
  log_max_s       log1p(max elapsed of the last K)
  last_ratio      elapsed / requested time of the last job (NaN without a request)
  median_ratio    median of elapsed / requested over the last K that had a request
  limit_frac      fraction of the last K that hit a limit (censored: TIMEOUT, OOM, run >= request)
  log_since_end_s log1p(seconds from the last job's end to ``at``)
then account: log_jobs, log_median_s, median_ratio; user+script signature ("sig"): log_jobs,
log_last_s, log_median_s; memory: name_log_last_mem_mb, name_log_max_mem_mb (peak RSS per node of
the last K of the user+name), user_log_last_mem_mb; CPUs: name_log_last_cpus, user_log_last_cpus
(log1p(TotalCPU / elapsed) of the last job where it is known). "Last" known values skip unknowns.
Missing (no job within the horizon, key not given, or no history at all) is NaN.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from slurm_harp.core.job import JobRecord, ended_by
from slurm_harp.core.key_history import (
    DAY_S,
    HORIZON_DAYS,
    K,
    KeyHistory,
    Stats,
    horizon_start,
    log_count,
    outcome_of,
    rounded,
)
from slurm_harp.core.request import JobRequest

__all__ = [
    "HISTORY_FEATURE_NAMES",
    "HORIZON_DAYS",
    "USER_JOBS",
    "HistoryIndex",
    "K",
    "history_matrix",
    "is_cold",
    "outcome_of",
]

_NAN = math.nan
_P = f"h{HORIZON_DAYS}d_"
_RUN_STATS = ("log_last_s", "log_mean2_s", "log_median_s", "log_max_s", "last_ratio", "median_ratio")
HISTORY_FEATURE_NAMES: tuple[str, ...] = (
    *(f"{_P}{key}_{name}" for key in ("user", "name") for name in (
        "log_jobs", *_RUN_STATS, "limit_frac", "log_since_end_s")),
    *(f"{_P}account_{name}" for name in ("log_jobs", "log_median_s", "median_ratio")),
    *(f"{_P}sig_{name}" for name in ("log_jobs", "log_last_s", "log_median_s")),
    *(f"{_P}{name}" for name in (
        "name_log_last_mem_mb", "name_log_max_mem_mb", "user_log_last_mem_mb",
        "name_log_last_cpus", "user_log_last_cpus")),
)  # fmt: skip
USER_JOBS = HISTORY_FEATURE_NAMES.index(f"{_P}user_log_jobs")
_NAN_BLOCK = [_NAN] * 9
# Keys expire() and drain() drop per hold of the lock: readers wait for a chunk, never a whole walk.
KEYS_PER_LOCK = 1000


def is_cold(row: np.ndarray) -> bool:
    """No job of this user ended within the horizon (or the user is unknown)."""
    return not float(row[USER_JOBS]) > 0.0


def _run_block(key: KeyHistory | None, at: int, first_s: int, out: list[float]) -> Stats | None:
    """The 9 user/name features; returns the stats for the memory and CPU columns."""
    if key is None:
        out.extend((0.0, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN))
        return None
    count, s = key.values(at, first_s)
    if s is None:
        out.extend((log_count(count), _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN))
        return None
    out.extend((log_count(count), s[0], s[1], s[2], s[3], s[4], s[5], s[6], rounded(math.log1p(at - s[10]))))
    return s


class HistoryIndex:
    """Recent outcomes per key, for serving. One writer (``add``, ``expire``) and many readers
    (``row``) may run concurrently. Memory: at most K outcomes and HORIZON_DAYS day counts per key;
    keys expire HORIZON_DAYS after their last job ended, and past ``max_keys`` a key is dropped (only
    then can serving differ from training): the user+name or user+signature key least recently
    added to while there is one, else the user or account key least recently added to. One user
    can make any number of the former (``-J run_$RANDOM``): dropping them first, no user's jobs
    make another user cold nor take an account's history while users and accounts are fewer than
    ``max_keys``."""

    def __init__(self, max_keys: int | None = None) -> None:
        # The user and account keys, and the user+name and user+signature keys, each in the order
        # they were last added to when max_keys is set.
        self._keys: dict[tuple[str, ...], KeyHistory] = {}
        self._named: dict[tuple[str, ...], KeyHistory] = {}
        self._max_keys = max_keys
        self._lock = threading.Lock()
        self._expired_day = -(2**62)  # the horizon's first day at the last expire
        self.added = 0

    def __len__(self) -> int:
        return len(self._keys) + len(self._named)

    def add(self, record: JobRecord) -> bool:
        """Count a finished job; False when it cannot be history (no end, zero run time)."""
        outcome = outcome_of(record)
        if outcome is None:
            return False
        request = record.request
        user = request.user_key
        keys: list[tuple[str, ...]] = []
        named: list[tuple[str, ...]] = []
        if user is not None:
            keys.append(("u", user))
            if request.job_name is not None:
                named.append(("n", user, request.job_name))
            if request.script_signature is not None:
                named.append(("s", user, request.script_signature))
        if request.account is not None:
            keys.append(("a", request.account))
        with self._lock:
            for table, names in ((self._keys, keys), (self._named, named)):
                for name in names:
                    key = table.get(name)
                    if key is None:
                        key = table[name] = KeyHistory()
                        if self._max_keys is not None and len(self) > self._max_keys:
                            victims = self._named or self._keys
                            del victims[next(iter(victims))]
                    elif self._max_keys is not None:
                        table[name] = table.pop(name)  # most recently added last
                    key.add(outcome)
            self.added += 1
        return True

    def expire(self, now: int) -> int:
        """Forget keys with no job ended within the horizon of ``now``; returns how many.

        Only memory is at stake (a stale key reads as no key). The horizon moves at UTC midnight,
        so a second call within a day returns at once; the writer finds stale keys without the
        lock (it alone changes them) and drops them KEYS_PER_LOCK at a time."""
        first_day = horizon_start(now) // DAY_S
        if first_day <= self._expired_day:
            return 0
        self._expired_day = first_day
        count = 0
        for table in (self._keys, self._named):
            stale = [name for name, key in table.items() if key.last_day < first_day]
            for start in range(0, len(stale), KEYS_PER_LOCK):
                with self._lock:
                    for name in stale[start : start + KEYS_PER_LOCK]:
                        del table[name]
            count += len(stale)
        return count

    def drain(self) -> None:
        """Forget every key, KEYS_PER_LOCK at a time: a large index freed at once holds the
        interpreter for as long as it takes (docs/benchmarks.md, "The history feed's polls")."""
        for keys in (self._keys, self._named):
            while keys:
                with self._lock:
                    for _ in range(min(len(keys), KEYS_PER_LOCK)):
                        keys.popitem()

    def values(self, request: JobRequest, at: int) -> list[float]:
        """The history features of ``request`` submitted at unix time ``at``, as floats."""
        first_s = horizon_start(at)
        user = request.user_key
        name, account, sig = request.job_name, request.account, request.script_signature
        out: list[float] = []
        with self._lock:
            get, get_named = self._keys.get, self._named.get
            if user is None:
                out.extend(_NAN_BLOCK)
                out.extend(_NAN_BLOCK)
                u = n = None
            else:
                u = _run_block(get(("u", user)), at, first_s, out)
                if name is None:
                    out.extend(_NAN_BLOCK)
                    n = None
                else:
                    n = _run_block(get_named(("n", user, name)), at, first_s, out)
            a = None if account is None else get(("a", account))
            if account is None:
                out.extend((_NAN, _NAN, _NAN))
            elif a is None:
                out.extend((0.0, _NAN, _NAN))
            else:
                count, s = a.values(at, first_s)
                out.extend((log_count(count), _NAN, _NAN) if s is None else (log_count(count), s[2], s[5]))
            if user is None or sig is None:
                out.extend((_NAN, _NAN, _NAN))
            else:
                k = get_named(("s", user, sig))
                count, s = (0, None) if k is None else k.values(at, first_s)
                out.extend((log_count(count), _NAN, _NAN) if s is None else (log_count(count), s[0], s[2]))
        out.extend((_NAN, _NAN) if n is None else (n[7], n[8]))
        out.append(_NAN if u is None else u[7])
        out.append(_NAN if n is None else n[9])
        out.append(_NAN if u is None else u[9])
        return out

    def row(self, request: JobRequest, at: int) -> np.ndarray:
        """History features (float32, shape (H,)) of a new submission at unix time ``at``.

        Assumes every job added so far ended at or before ``at`` (true for live submissions)."""
        return np.array(self.values(request, at), dtype=np.float32)


def history_matrix(records: Sequence[JobRecord]) -> np.ndarray:
    """History features of every record (float32, (n, H), in the input order): each row sees
    exactly the jobs that ended at or before that record's submit time. No submit time: NaN."""
    n = len(records)
    out = np.full((n, len(HISTORY_FEATURE_NAMES)), np.nan, dtype=np.float32)
    submits = np.array([_or(r.request.submit_time) for r in records], dtype=np.float64)
    ends = np.array([_or(r.end_time) for r in records], dtype=np.float64)
    # Stable sorts: equal submit times keep the input order. Adds need no tie order (the ring
    # orders outcomes itself); ends are merged in as the sweep passes their time.
    by_submit = np.argsort(submits, kind="stable")[: int(np.sum(~np.isnan(submits)))].tolist()
    by_end = np.argsort(ends, kind="stable")[: int(np.sum(~np.isnan(ends)))].tolist()  # NaN sorts last
    end_at = ends.tolist()
    index = HistoryIndex()
    add, values = index.add, index.values
    pending, last = 0, len(by_end)
    for i in by_submit:
        record = records[i]
        at = record.request.submit_time or 0
        while pending < last and ended_by(end_at[by_end[pending]], at):
            add(records[by_end[pending]])
            pending += 1
        out[i] = values(record.request, at)
    return out


def _or(value: int | None) -> float:
    return _NAN if value is None else float(value)
