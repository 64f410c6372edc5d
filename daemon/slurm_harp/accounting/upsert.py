"""The job store's writes: the upsert of a batch of jobs, the per-source harvest cursor, and the
transaction both are made in (jobstore.JobStore.merge). A merge only moves the cursor forward;
set_cursor moves it back, for a harvest whose host clock stepped back, and replaces a damaged one
(--start). The cursor is read here too, checked (read_cursor): a value no harvest sets is a
CursorError, not a time to read from.

Writes are idempotent: an upsert that brings nothing new leaves a row untouched (ingested_at
included), so harvesting the same window twice changes nothing. A re-read (the same job: the same
source, job id and submit time) never mixes with another job, and never forgets: it fills
in what was unknown (accounting completes a job's row seconds after it ends) but never erases a
known value, nor lowers a maximum over the job's steps (a re-read whose step line came out bad
has fewer steps, not a smaller job). The per-source harvest cursor is written in the same
transaction as the rows it covers: a crash loses both or neither.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from slurm_harp.accounting.job_columns import DATA_NAMES, not_finite, row_of
from slurm_harp.accounting.store_schema import IDENTITY
from slurm_harp.core.job import JobRecord

log = logging.getLogger(__name__)

# Columns that sacct.read_sacct may build from the job's step lines.
_OVER_STEPS = frozenset({"max_rss_mb", "total_cpu_s"})


def _merged(name: str) -> str:
    """The SQL for column ``name`` after an upsert: the re-read's value unless it is unknown, and
    for the columns made from steps never less than what was stored."""
    kept = f"COALESCE(excluded.{name}, jobs.{name})"
    if name in _OVER_STEPS:  # SQLite's two-argument MAX is NULL if either is
        return f"MAX({kept}, COALESCE(jobs.{name}, excluded.{name}))"
    return kept


def _upsert_sql() -> str:
    names = ["source", "job_id", *DATA_NAMES, "ingested_at"]
    changed = " OR ".join(f"jobs.{n} IS NOT {_merged(n)}" for n in DATA_NAMES)
    return (
        f"INSERT INTO jobs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
        f"ON CONFLICT ({IDENTITY}) DO UPDATE SET "
        + ", ".join(f"{n} = {_merged(n)}" for n in DATA_NAMES)
        + f", ingested_at = excluded.ingested_at WHERE {changed}"
    )


_UPSERT_SQL = _upsert_sql()
# The cursors a harvest sets: whole unix seconds from 2000-01-01 (no Slurm accounting is older) to
# 9999-12-31 UTC (the last time sacct's -S can be given). A cursor of 0 had a run read every day
# since 1970, 20,789 sacct calls (every run, while sacct held no job), and text failed every run.
CURSOR_FIRST = 946_684_800
CURSOR_LAST = 253_402_300_799
_SQLITE_MIN, _SQLITE_MAX = -(2**63), 2**63 - 1  # its INTEGER
# The rows inserted after ``last_row`` (SQLite numbers a new row above every row there), and of those
# the ones whose (source, job_id) an older row has (jobs_identity's prefix).
_INSERTED_SQL = (
    "SELECT count(*), ifnull(sum(EXISTS (SELECT 1 FROM jobs AS old WHERE old.source = new.source "
    "AND old.job_id = new.job_id AND old.rowid < new.rowid)), 0) FROM jobs AS new WHERE new.rowid > ?"
)


@dataclass(frozen=True)
class MergeResult:
    """``reused``: of the rows inserted, those whose job id the source had already, with another
    submit time (an id given again after MaxJobId wrapped or slurmctld lost its state, or a requeued
    job's next run): each is a job of its own."""

    received: int
    inserted: int
    updated: int
    reused: int = 0
    refused: int = 0  # records left out: no row holds them (merge)

    @property
    def changed(self) -> int:
        return self.inserted + self.updated


def merge(
    db: sqlite3.Connection, records: Iterable[JobRecord], source: str, cursor: int | None
) -> MergeResult:
    """Upsert ``records`` under ``source`` and (if given) advance its cursor, in one transaction.
    A record that cannot be a row (a whole number past SQLite's 64 bits: SQLite raised
    OverflowError, and the batch, a harvest's window, was rolled back on every run) is left out,
    counted in ``refused`` and named in one warning: the others are stored."""
    received = 0
    now = time.time()
    unknown: list[str] = []  # "job_id: field, ..." of the records with a number not finite
    refused: list[str] = []  # "job_id: why" of the records left out

    def rows() -> Iterator[tuple[Any, ...]]:
        nonlocal received
        for record in records:
            received += 1
            try:
                row = (source, *row_of(record), now)
                if any(type(v) is int and not _SQLITE_MIN <= v <= _SQLITE_MAX for v in row):
                    raise OverflowError("a whole number past SQLite's 64 bits")
            except (ValueError, TypeError, ArithmeticError) as exc:
                refused.append(f"{record.job_id!r:.40}: {exc}")
                continue
            if fields := not_finite(record):
                unknown.append(f"{record.job_id}: {', '.join(fields)}")
            yield row

    with Transaction(db):
        if cursor is not None:  # first, so that a failing row is seen to roll it back too
            _advance(db, source, cursor)
        last_row = db.execute("SELECT ifnull(max(rowid), 0) FROM jobs").fetchone()[0]
        written = db.executemany(_UPSERT_SQL, rows()).rowcount
        inserted, reused = db.execute(_INSERTED_SQL, (last_row,)).fetchone()
    if unknown:
        log.warning(
            "%d %s jobs have a number that is not finite, stored as unknown (job %s)",
            len(unknown),
            source,
            unknown[0],
        )
    if refused:
        log.warning("%d %s jobs not stored, no row holds them (job %s)", len(refused), source, refused[0])
    return MergeResult(received, inserted, max(written, 0) - inserted, reused, len(refused))


class CursorError(ValueError):
    """A source's harvest cursor that is no time a harvest sets (text, 0, negative, a fraction, past
    9999): the store's state table is damaged. The message names the store, the source and the value."""


def read_cursor(db: sqlite3.Connection, source: str, path: object) -> int | None:
    """The harvest cursor of ``source`` (None: none yet) in the store at ``path``; CursorError for
    a value out of CURSOR_FIRST..CURSOR_LAST or not a whole number, before anyone reads from it."""
    row = db.execute("SELECT cursor_end FROM state WHERE source = ?", (source,)).fetchone()
    if row is None:
        return None
    value = row[0]
    if type(value) is int and CURSOR_FIRST <= value <= CURSOR_LAST:
        return value
    raise CursorError(
        f"the job store {path}: the harvest cursor of source {source!r} is {value!r:.40}, no time a "
        "harvest sets (whole unix seconds from 2000-01-01 to 9999-12-31 UTC): its state table is damaged"
    )


def set_cursor(db: sqlite3.Connection, source: str, end_time: int) -> None:
    """Set the cursor of ``source`` to ``end_time``, in a transaction of its own: back too (the
    harvest's host clock stepped back: commands.harvest_cursor; nothing is lost by it, the next read starts
    earlier and a job read again merges into its row), or over a damaged one (harvest --start)."""
    with Transaction(db):
        db.execute(
            "INSERT INTO state (source, cursor_end) VALUES (?, ?) ON CONFLICT (source) "
            "DO UPDATE SET cursor_end = excluded.cursor_end",
            (source, int(end_time)),
        )


def _advance(db: sqlite3.Connection, source: str, end_time: int) -> None:
    db.execute(
        "INSERT INTO state (source, cursor_end) VALUES (?, ?) ON CONFLICT (source) "
        "DO UPDATE SET cursor_end = max(cursor_end, excluded.cursor_end)",
        (source, int(end_time)),
    )


class Transaction:
    """``with Transaction(db):`` one BEGIN IMMEDIATE ... COMMIT (the connection is in autocommit
    mode), rolled back when the block raises or the commit fails."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
                return
            except BaseException:
                self._rollback()
                raise
        self._rollback()

    def _rollback(self) -> None:
        if self._db.in_transaction:  # some errors (disk full, I/O) already rolled back
            self._db.execute("ROLLBACK")
