"""The job store: finished jobs from every source in one embedded SQLite database.

One row per job, (source, job_id, submit_time) (store_schema.py: a reused job id, or a requeued
job's next run, is a job of its own), holding every JobRecord field, with the JobRequest fields
flattened into columns of the same names (job_columns.py), plus ``ingested_at`` (unix seconds of the
last insert or change).
SQLite numbers each inserted row above every row already there, and an update keeps the number: a
reader finds the rows added since it last looked by that number (``position``, ``added``).
Columns follow the dataclasses: a field added to JobRecord or JobRequest becomes a nullable column,
added to an existing database when it is opened. ``schema_version`` in ``meta`` is for changes that
cannot be made that way (store_schema.py).

Writes (the upsert, the harvest cursor, their transaction) are upsert.py's, and so is the check of
a cursor read (a damaged one is a CursorError, as a damaged schema_version is a SchemaVersionError).

Every reader skips a row holding a value not of its column's type (SQLite keeps text written over
a number by hand) and says so in one warning naming the first such row and column (``_read``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from slurm_harp.accounting import training_window, upsert
from slurm_harp.accounting.job_columns import BadValue, record_of, select_sql
from slurm_harp.accounting.store_schema import (
    SCHEMA_VERSION,
    SchemaVersionError,
    check_version,
    check_writable,
    migrate,
)
from slurm_harp.accounting.upsert import CursorError, MergeResult, Transaction
from slurm_harp.core.job import JobRecord
from slurm_harp.core.text import question_marks
from slurm_harp.regular_file import refuse_non_regular
from slurm_harp.state_dir import create_file

__all__ = ["SCHEMA_VERSION", "CursorError", "JobStore", "MergeResult", "Position", "SchemaVersionError"]

log = logging.getLogger(__name__)

HOUR_S = 3600  # tagged_hours' span
LOCK_WAIT_S = 30.0  # how long a connection waits for another's lock
# Every reader's order by submit time: a total one, (source, job_id, submit_time) being a key.
SUBMIT_ORDER = " ORDER BY submit_time, source, job_id"


# SQLite's errors that say the file is no usable database: no run gets past them by itself.
_DAMAGED = frozenset({"SQLITE_NOTADB", "SQLITE_CORRUPT"})
_LOCKED = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})


def storable(name: str) -> str:
    """``name`` as the store can key a source: each byte of a file name or --source-name that is
    not UTF-8 (held as a surrogate, which SQLite cannot store as text) as "?", core.text's rule,
    said in a warning. `harp import` and `harp harvest` alike."""
    key = question_marks(name)
    if key != name:
        log.warning("source name %r is not UTF-8: its jobs are stored under %r", name, key)
    return key


def store_error(path: str | Path, exc: sqlite3.Error) -> tuple[str, bool]:
    """What ``exc`` says of the job store at ``path``, for a log line, and whether a later run gets
    past it by itself (False: not until someone restores the store or moves it away)."""
    name = getattr(exc, "sqlite_errorname", "")
    if name in _LOCKED or "locked" in str(exc):
        return (
            f"the job store {path} is locked: another writer (a harvest, a nightly, an import) held "
            f"it past the {LOCK_WAIT_S:g} s wait ({exc})",
            True,
        )
    if name in _DAMAGED or "not a database" in str(exc) or "malformed" in str(exc):
        return (
            f"the job store {path} is damaged or no SQLite database ({exc}): every run stops here until "
            "it is restored or moved away (the harvest then starts a new store, from 30 days back)",
            False,
        )
    return f"the job store {path}: {exc}", True


@dataclass(frozen=True)
class Position:
    """How far the store has grown: its row count, the rowid (0 when empty) and (source, job_id)
    of its newest row (that row deleted, a new one may be given its rowid), and the latest
    ingested_at, which a row changed in place moves too."""

    rows: int
    last_row: int
    newest: tuple[str, str] | None = None
    ingested: float = 0.0


class JobStore:
    """``JobStore(path)``: open (creating if needed) the database at ``path``; use as a context manager."""

    def __init__(self, path: str | Path, *, readonly: bool = False) -> None:
        """``readonly``: for readers such as the daemon; the database must exist and is never written."""
        self.path = Path(path)
        # SQLite's read-only open of a FIFO would wait for a writer for good (its read-write open
        # fails at once: pread on a pipe). A FIFO swapped in between this check and SQLite's open
        # still hangs a reader: SQLite opens by name only, and given /proc/self/fd/N of a checked
        # descriptor it reads the link and opens the name it gives (SQLite 3.40), so the window
        # stays. Only who may write in the store's directory can use it, and can already rewrite
        # the store itself.
        refuse_non_regular(self.path)
        if readonly:
            # The path's bytes, quoted: a name that is not UTF-8 (held as surrogates) is no str to quote.
            uri = f"file:{urllib.parse.quote(os.fsencode(self.path.absolute()))}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=LOCK_WAIT_S)
        else:
            # Made here, not by SQLite, for its mode and owner; SQLite gives the -wal and -shm files
            # beside it the same mode, and run as root, the same owner.
            create_file(self.path)
            # Autocommit mode: every transaction below is an explicit BEGIN IMMEDIATE ... COMMIT.
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=LOCK_WAIT_S)
        try:
            if readonly:
                check_version(self._db, self.path)
            else:
                check_writable(self._db, self.path)  # another program's file stays as it is
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                with Transaction(self._db):
                    migrate(self._db, self.path)
        except BaseException:
            self._db.close()
            raise

    # ---- writing ---------------------------------------------------------------------------------

    def merge(self, records: Iterable[JobRecord], source: str, *, cursor: int | None = None) -> MergeResult:
        """Upsert ``records`` and (if given) advance the cursor of ``source``, in one transaction."""
        return upsert.merge(self._db, records, source, cursor)

    def upsert(self, records: Iterable[JobRecord], source: str, *, cursor: int | None = None) -> int:
        """Like merge(); returns how many rows were inserted or changed."""
        return self.merge(records, source, cursor=cursor).changed

    def set_cursor(self, source: str, end_time: int) -> None:
        """Set the cursor of ``source`` to ``end_time``, earlier too (merge never moves it back)."""
        upsert.set_cursor(self._db, source, end_time)

    # ---- reading ---------------------------------------------------------------------------------

    def cursor(self, source: str) -> int | None:
        """The harvest cursor of ``source``, None when it has none; CursorError when it holds no
        time a harvest sets (a damaged state table), naming the store, the source and the value."""
        return upsert.read_cursor(self._db, source, self.path)

    def count(self, source: str | None = None) -> int:
        return self._count(source)

    def _count(self, source: str | None) -> int:
        if source is None:
            return int(self._db.execute("SELECT count(*) FROM jobs").fetchone()[0])
        return int(self._db.execute("SELECT count(*) FROM jobs WHERE source = ?", (source,)).fetchone()[0])

    def sources(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT source FROM jobs ORDER BY source")]

    def position(self) -> Position:
        """Where the store stands now, read in one statement (one snapshot)."""
        row = self._db.execute(
            "SELECT (SELECT count(*) FROM jobs), rowid, source, job_id, (SELECT max(ingested_at) FROM jobs) "
            "FROM jobs WHERE rowid = (SELECT max(rowid) FROM jobs)"
        ).fetchone()
        if row is None:
            return Position(0, 0)
        return Position(int(row[0]), int(row[1]), (row[2], row[3]), float(row[4]))

    def changed_since(self, position: Position) -> int:
        """How many of the rows ``position`` covers were changed in place after it (by their
        ingested_at: a harvester whose clock went back hides its changes)."""
        sql = "SELECT count(*) FROM jobs WHERE ingested_at > ? AND rowid <= ?"
        return int(self._db.execute(sql, (position.ingested, position.last_row)).fetchone()[0])

    def holds(self, position: Position) -> bool:
        """Whether ``position``'s newest row is still there under its rowid: rows added since are
        then exactly those above it."""
        row = self._db.execute("SELECT source, job_id FROM jobs WHERE rowid = ?", (position.last_row,))
        return tuple(row.fetchone() or ()) == (position.newest or ())

    def records(
        self,
        source: str | None = None,
        since: int | None = None,
        until: int | None = None,
        *,
        ended_since: int | None = None,
        ended_before: int | None = None,
        tagged: bool = False,
        upto_row: int | None = None,
    ) -> Iterator[JobRecord]:
        """Jobs ordered by submit time; ``since`` <= submit_time < ``until``, ``ended_since`` <=
        end_time < ``ended_before`` when given; ``tagged``: only jobs with a harp tag;
        ``upto_row``: only rows added up to that position's ``last_row``."""
        where, params = ["harp_tag IS NOT NULL"] if tagged else [], []
        for clause, value in (
            ("source = ?", source),
            ("submit_time >= ?", since),
            ("submit_time < ?", until),
            ("end_time >= ?", ended_since),
            ("end_time < ?", ended_before),
            ("rowid <= ?", upto_row),
        ):
            if value is not None:
                where.append(clause)
                params.append(value)
        present = self._present()
        if tagged and "harp_tag" not in present:
            return
        select = select_sql(present)
        if where:
            select += " WHERE " + " AND ".join(where)
        yield from self._read(select + SUBMIT_ORDER, params)

    def training_records(self, newest: int | None, now: float) -> Iterator[JobRecord]:
        """What training on the ``newest`` jobs with the clock at ``now`` reads, in records()'
        order: those jobs and every job their history features can count (training_window.py).
        Every job when the store holds no more than ``newest`` to train on, or ``newest`` is None
        or not above 0 (build_dataset's max_rows: no cap)."""
        present = self._present()
        # One snapshot for the window and the rows (a read transaction): a harvest writing between
        # the two could leave fewer of the newest jobs usable than the window was cut for.
        self._db.execute("BEGIN")
        try:
            bound = None
            if newest is not None and newest > 0:
                bound = training_window.window(self._db, present, newest, now)
            if bound is None:
                yield from self.records()
                return
            sql = f"{select_sql(present)} WHERE {training_window.WHERE_SQL}{SUBMIT_ORDER}"
            yield from self._read(sql, bound.params())
        finally:
            self._db.execute("COMMIT")

    def added(self, after_row: int, upto_row: int) -> Iterator[JobRecord]:
        """The rows added after one position's ``last_row`` up to another's, in the order added."""
        sql = select_sql(self._present()) + " WHERE rowid > ? AND rowid <= ? ORDER BY rowid"
        yield from self._read(sql, (after_row, upto_row))

    def tagged_hours(self, ended_since: int) -> dict[int, tuple[int, float, int]]:
        """Per hour of end time (end_time // HOUR_S) from ``ended_since`` on, a signature of its
        tagged rows: count, sum of ingested_at and newest rowid. A row added, changed (ingested_at
        moves) or deleted changes its hour's signature; computed in SQLite, no row is read here."""
        if "harp_tag" not in self._present():
            return {}
        sql = (
            f"SELECT end_time / {HOUR_S}, count(*), total(ingested_at), max(rowid) FROM jobs "
            f"WHERE end_time >= ? AND harp_tag IS NOT NULL GROUP BY end_time / {HOUR_S}"
        )
        return {int(h): (int(n), float(s), int(r)) for h, n, s, r in self._db.execute(sql, (ended_since,))}

    def runs_of(self, user_name: str, job_name: str, *, newest: int = 1000) -> list[JobRecord]:
        """The ``newest`` jobs of one user with one job name, newest first: the only rows the
        advice reads for that user (the filter is in the query, not after it)."""
        sql = (
            select_sql(self._present()) + " WHERE user_name = ? AND job_name = ? "
            "ORDER BY submit_time DESC, source, job_id LIMIT ?"
        )
        return list(self._read(sql, (user_name, job_name, int(newest))))

    def _read(self, sql: str, params: Sequence[object] | Mapping[str, object]) -> Iterator[JobRecord]:
        """The JobRecords of ``sql``'s rows. A row with a value not of its column's type (text in
        a number column: a store edited by hand) is skipped, not the read: the other rows still
        count. One warning says how many, and names the first row and column."""
        skipped, first = 0, None
        try:
            for row in self._db.execute(sql, params):
                try:
                    record = record_of(row)
                except BadValue as exc:
                    skipped, first = skipped + 1, first or exc
                    continue
                yield record
        finally:
            if skipped:
                log.warning(
                    "job store %s: %d rows skipped, a value not of its column's type (%s)",
                    self.path,
                    skipped,
                    first,
                )

    def _present(self) -> set[str]:
        return {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}

    def latest_end(self, now: float | None = None, source: str | None = None) -> int | None:
        """The latest end time of any job in the store (of ``source`` alone, when given) not after
        ``now`` (default: this host's clock), None when there is none: how fresh the harvest is. An
        End after now is a clock's error (the controller's clock ran ahead, then stepped back):
        counted, it held the freshness in the future, and HarpHarvestStale could not fire until the
        clock caught up with it."""
        at = time.time() if now is None else now
        of_source = "" if source is None else " AND source = ?"
        args = (int(at),) if source is None else (int(at), source)
        row = self._db.execute(
            f"SELECT MAX(end_time) FROM jobs WHERE end_time <= ?{of_source}", args
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # ---- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
