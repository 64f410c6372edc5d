"""Keeps the daemon's job history current from the harvester's job store, in a background thread.

At start it seeds a HistoryIndex with the jobs that ended within ``window_days``; then every
``poll_seconds`` it reads the store's position (row count, newest rowid, latest ingested_at) and,
when rows were added, reads those rows only, whenever their jobs were submitted: a poll costs what
the harvester brought. When the store did not just grow (rows deleted, or renumbered), the index
is rebuilt from the whole window and swapped in atomically. Rows changed in place (their
ingested_at moves) are taken in by a rebuild too, at most once every REBUILD_AFTER_CHANGE_S.
Readers never wait for a rebuild. A store file replaced (a restored backup) is reopened and read
whole; a removed one keeps the history known.

Live features equal training features once every job that ended before a submission is in the
store: history is as fresh as the harvester runs. A job whose end is still ahead of this host's
clock (a controller clock that ran ahead) is held back until its end has passed, as training counts
a job only for submissions after its end.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from slurm_harp.accounting.jobstore import JobStore, Position
from slurm_harp.config import HistorySettings
from slurm_harp.core.history import HORIZON_DAYS, HistoryIndex
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.server.heap import RECORDS_PER_SETTLE, settling
from slurm_harp.server.outcome_metrics import OutcomeMetrics

log = logging.getLogger(__name__)

DAY_S = 86400
# Keys (users, user+names, accounts, signatures) kept at most: bounds memory on a huge site. Past it,
# user+name and user+signature keys go first (HistoryIndex): one user's many names make no one cold.
MAX_KEYS = 1_000_000
# Rows changed in place (the harvester completing a row it read half-filled) are taken in by a
# rebuild, at most this often: a site whose rows change at every harvest is not rebuilt each time.
REBUILD_AFTER_CHANGE_S = 3600
# A job ending later than this past the feed's clock is held back until its end has passed. Added at
# once, one row a year ahead moved its keys' 30-day horizon a year on: the account's and user's real
# jobs were dropped as too old, and users with no recent job counted it and turned warm. The slack
# lets the few seconds two hosts' clocks differ by pass.
AHEAD_SLACK_S = 60
AHEAD_LOG_S = 3600  # jobs held back are said at most this often (with their count), not one by one


class HistoryFeed:
    """A HistorySource for the Predictor, fed from the job store at ``settings.db``."""

    def __init__(self, settings: HistorySettings, clock: Callable[[], float] = time.time) -> None:
        if settings.db is None:
            raise ValueError("HistoryFeed needs settings.db")
        self._settings = settings
        self._db = settings.db
        self._clock = clock
        self._index = HistoryIndex(max_keys=MAX_KEYS)
        # The index a rebuild replaced, freed a key at a time at the next poll (a reader may still
        # hold it until then): freed at once, a large one holds the interpreter for tens of ms.
        self._retired: HistoryIndex | None = None
        self._position: Position | None = None  # the store's, at the last poll
        self._changed_in_place = False  # rows read before were changed since: rebuild when due
        self._rebuilt_at = -float("inf")
        self._ahead: list[JobRecord] = []  # jobs ending after the clock (+ slack), by end
        self._ahead_logged = -float("inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._missing_logged = False
        self._failing: str | None = None  # the error of the polls failing since the last good one
        self._opened = (0, 0)  # (st_dev, st_ino) of the store file open now
        self.seeded = threading.Event()  # set after the first attempt to read the store
        self.outcomes: OutcomeMetrics | None = None  # recomputed from the same store, when set
        # Called after every RECORDS_PER_SETTLE records read or added and after each poll that
        # grew the history (harp serve: server.heap.settle, which keeps full collections short).
        self.settle: Callable[[], object] | None = None
        self.polls = 0
        self.rebuilds = 0
        if settings.window_days < HORIZON_DAYS:
            log.warning(
                "history.window_days = %d is shorter than the features' %d-day horizon: live history "
                "features will count fewer jobs than training did",
                settings.window_days,
                HORIZON_DAYS,
            )

    @property
    def index(self) -> HistoryIndex:
        return self._index

    def row(self, request: JobRequest, at: int) -> np.ndarray:
        return self._index.row(request, at)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="harp-history", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        # SQLite connections belong to the thread that opened them: the store lives here only.
        store: JobStore | None = None
        try:
            while not self._stop.is_set():
                try:
                    if store is not None and self._replaced():
                        # A restored backup or a store moved into place: the open connection
                        # would read the old file for good.
                        log.warning("history: %s was replaced or removed; reopening it", self._db)
                        store.close()
                        store = None
                        self._position = None  # rebuild from the new file
                    if store is None:
                        store = self._open()
                    if store is not None:
                        grew = self.refresh(store)
                        if self.outcomes is not None:
                            self.outcomes.refresh(store, force=grew)
                        if grew and self.settle is not None:
                            self.settle()
                except Exception as exc:
                    self._failed(exc)
                    if store is not None:
                        store.close()
                    store = None
                else:
                    if self._failing is not None and store is not None:
                        log.info("history: %s reads again", self._db)
                        self._failing = None
                finally:
                    self.polls += 1
                    self.seeded.set()
                self._stop.wait(self._poll_s)
        finally:
            if store is not None:
                store.close()

    def _failed(self, exc: Exception) -> None:
        """Log a poll's error: at ERROR when it is new (a FIFO at the store's path fails every
        poll the same way: one line, not a traceback each time), then at DEBUG while it repeats.
        An error that is neither an OSError nor SQLite's is a bug: its first line has the traceback."""
        said = f"{type(exc).__name__}: {exc}"
        if said == self._failing:
            log.debug("history: reading %s failed again: %s", self._db, said)
            return
        expected = isinstance(exc, OSError | sqlite3.Error)
        log.error(
            "history: reading %s failed: %s; retrying every %gs, logged again when it reads",
            self._db,
            said,
            self._poll_s,
            exc_info=None if expected else exc,
        )
        self._failing = said

    @property
    def _poll_s(self) -> float:
        return self._settings.poll_seconds

    def _open(self) -> JobStore | None:
        # Opening would create an empty database: wait for the harvester to make it.
        if not self._db.exists():
            if not self._missing_logged:
                log.warning("history: %s does not exist yet; every user is cold until it does", self._db)
                self._missing_logged = True
            return None
        log.info("history: reading jobs from %s", self._db)
        st = self._db.stat()  # before opening: a file replaced in between is caught next poll
        self._opened = (st.st_dev, st.st_ino)
        return JobStore(self._db, readonly=True)  # the harvester owns it: never write

    def _replaced(self) -> bool:
        try:
            st = self._db.stat()
        except FileNotFoundError:
            return True
        return (st.st_dev, st.st_ino) != self._opened

    def refresh(self, store: JobStore) -> bool:
        """One poll: add the rows the store gained since the last one (or rebuild, also when rows
        read before changed and the last rebuild is REBUILD_AFTER_CHANGE_S old), then expire;
        True when the store's position changed."""
        position = store.position()  # first: rows added after it are read by the next poll
        now = int(self._clock())
        retired, self._retired = self._retired, None
        if retired is not None:
            retired.drain()
        known = self._position
        changed = position != known
        if changed:
            if known is not None and position.ingested > known.ingested:
                in_place = store.changed_since(known)
                if in_place and not self._changed_in_place:
                    log.info("history: %d jobs changed in place; rebuilding when due", in_place)
                self._changed_in_place |= in_place > 0
            if not self._add_new(store, now, position):
                self._rebuild(store, now, position)
            self._position = position
        if self._changed_in_place and now - self._rebuilt_at >= REBUILD_AFTER_CHANGE_S:
            self._rebuild(store, now, position)
        self._release(now)
        self._index.expire(now)
        return changed

    @property
    def held_back(self) -> int:
        """Jobs read whose end is still ahead of the clock: not counted yet."""
        return len(self._ahead)

    def _hold_ahead(self, records: list[JobRecord], now: int, ahead: list[JobRecord]) -> Iterator[JobRecord]:
        """The first of ``records`` (sorted by end), those that may count at ``now``; the others go
        to ``ahead``, said in one line at most every AHEAD_LOG_S. No copy: a rebuild's list is long."""
        due = len(records)
        while due and _end(records[due - 1]) > now + AHEAD_SLACK_S:
            due -= 1
        if due == len(records):
            return iter(records)
        later = records[due:]
        ahead.extend(later)
        ahead.sort(key=_end)
        if now - self._ahead_logged >= AHEAD_LOG_S:
            self._ahead_logged = now
            log.warning(
                "history: %d jobs in %s end after this host's clock (the latest %d s ahead: a clock "
                "that ran ahead?); each counts once its end has passed",
                len(later), self._db, _end(later[-1]) - now,
            )  # fmt: skip
        return itertools.islice(records, due)

    def _release(self, now: int) -> None:
        """Add the held-back jobs whose end has passed."""
        due = 0
        while due < len(self._ahead) and _end(self._ahead[due]) <= now + AHEAD_SLACK_S:
            due += 1
        if due:
            for record in self._ahead[:due]:
                self._index.add(record)
            del self._ahead[:due]
            log.debug("history: %d jobs held back counted, their end passed", due)

    def _add_new(self, store: JobStore, now: int, position: Position) -> bool:
        """Add the rows added since the last poll; False unless the store only grew by them, if at
        all (a first read, rows deleted or renumbered: only a rebuild is then right)."""
        known = self._position
        if known is None or position.last_row < known.last_row or not store.holds(known):
            return False
        first_end = now - self._settings.window_days * DAY_S
        read = 0
        fresh: list[JobRecord] = []
        for record in settling(store.added(known.last_row, position.last_row), self.settle):
            read += 1
            if (record.end_time or 0) >= first_end:
                fresh.append(record)
        if read != position.rows - known.rows:
            return False
        fresh.sort(key=_end)
        for record in settling(self._hold_ahead(fresh, now, self._ahead), self.settle):
            self._index.add(record)
        log.debug("history: %d new jobs, %d within the window", read, len(fresh))
        return True

    def _rebuild(self, store: JobStore, now: int, position: Position) -> None:
        first_end = now - self._settings.window_days * DAY_S
        jobs = list(settling(store.records(ended_since=first_end, upto_row=position.last_row), self.settle))
        jobs.sort(key=_end)
        index = HistoryIndex(max_keys=MAX_KEYS)
        ahead: list[JobRecord] = []
        for record in settling(self._hold_ahead(jobs, now, ahead), self.settle):
            index.add(record)
        self._retired, self._index = self._index, index  # readers see the old index or the new one
        self._ahead = ahead
        while jobs:  # the records too, a chunk at a time
            del jobs[-RECORDS_PER_SETTLE:]
        self.rebuilds += 1
        self._changed_in_place, self._rebuilt_at = False, now
        log.info("history: %d jobs from %s (%d keys)", index.added, self._db, len(index))


def _end(record: JobRecord) -> int:
    return record.end_time or 0
