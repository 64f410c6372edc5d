"""The job store's schema: created, migrated from an older version, or refused (SchemaVersionError)
when newer or when its version is not one (a damaged meta table).

A job is (source, job_id, submit_time), as slurmdbd keys its own job table (id_job, time_submit):
after MaxJobId wraps, or slurmctld starts without its StateSaveLocation, a new job gets the JobIDRaw
of an old one, and a requeued job's next run is a new accounting record with a new Submit. Version 1
keyed (source, job_id), so such a job overwrote the other; opening it rebuilds the table with the
same rows under the same rowids (readers find the rows added since they looked by rowid).
An unknown submit time counts as -1 in the key: NULLs all differ, and a re-read would add a row.
Columns follow the dataclasses (job_columns.py): a field added becomes a nullable column.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from slurm_harp.accounting.job_columns import COLUMNS, SQL_TYPES

SCHEMA_VERSION = 2
# What makes a row one job: the unique index below, and the upsert's ON CONFLICT target.
IDENTITY = "source, job_id, ifnull(submit_time, -1)"


class SchemaVersionError(ValueError):
    """The store's schema_version is newer than this code, or no version it ever had (damaged):
    not readable here. The message names the store and the value."""


def check_version(db: sqlite3.Connection, path: Path) -> None:
    """For readers: the store must have been created, and by a harvester no newer than this code.
    Another SQLite file (no meta table, or another program's) is no job store either, said so."""
    try:
        version = _stored_version(db, path)
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc) and "no such column" not in str(exc):
            raise
        raise SchemaVersionError(f"{path}: not a job store made by harp ({exc})") from None
    if version is None:
        raise SchemaVersionError(f"{path}: no schema_version: not a job store made by harp")


def check_writable(db: sqlite3.Connection, path: Path) -> None:
    """For the writer, before it changes anything (WAL, tables): a database that holds anything is
    checked as readers check it, and must hold a jobs table, so another program's SQLite file is
    refused, not given harp's tables (one with a meta table of the same shape too); an empty one (a
    new file) is harp's to create. Every store harp made wrote its schema_version and its jobs
    table in one transaction, so none is refused for lacking either."""
    if db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None:
        return
    check_version(db, path)
    jobs = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs' COLLATE NOCASE"
    if db.execute(jobs).fetchone() is None:
        raise SchemaVersionError(f"{path}: not a job store made by harp (no jobs table)")


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Create or bring up to date the store's tables and indexes; in the caller's transaction."""
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    _stored_version(db, path)
    defs = ", ".join(c.definition for c in COLUMNS)
    db.execute(f"CREATE TABLE IF NOT EXISTS jobs (source TEXT NOT NULL, {defs}, ingested_at REAL NOT NULL)")
    present = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
    for c in COLUMNS:
        if c.name not in present:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {c.name} {SQL_TYPES[c.kind]}")
    if any(r[5] for r in db.execute("PRAGMA table_info(jobs)")):  # version 1: PRIMARY KEY (source, job_id)
        _drop_primary_key(db)
    db.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS jobs_identity ON jobs ({IDENTITY})")
    db.execute("CREATE INDEX IF NOT EXISTS jobs_submit ON jobs (submit_time)")
    db.execute("CREATE INDEX IF NOT EXISTS jobs_source_submit ON jobs (source, submit_time)")
    db.execute("CREATE INDEX IF NOT EXISTS jobs_end ON jobs (end_time)")
    # Readers find the rows changed since they last looked (changed_since).
    db.execute("CREATE INDEX IF NOT EXISTS jobs_ingested ON jobs (ingested_at)")
    # The advice reads one user's runs of one job name.
    db.execute("CREATE INDEX IF NOT EXISTS jobs_user_name ON jobs (user_name, job_name, submit_time)")
    db.execute("CREATE TABLE IF NOT EXISTS state (source TEXT PRIMARY KEY, cursor_end INTEGER NOT NULL)")
    version = str(SCHEMA_VERSION)
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (version,))


def _drop_primary_key(db: sqlite3.Connection) -> None:
    """The jobs table again without its primary key (SQLite cannot drop one in place): the same
    columns as declared (a column added later is nullable, and may hold NULLs), rows and rowids."""
    columns = [(r[1], r[2], r[3]) for r in db.execute("PRAGMA table_info(jobs)")]
    defs = ", ".join(f"{name} {kind}{' NOT NULL' if not_null else ''}" for name, kind, not_null in columns)
    names = ", ".join(["rowid", *(name for name, _, _ in columns)])
    db.execute("ALTER TABLE jobs RENAME TO jobs_v1")
    db.execute(f"CREATE TABLE jobs ({defs})")
    db.execute(f"INSERT INTO jobs ({names}) SELECT {names} FROM jobs_v1")
    db.execute("DROP TABLE jobs_v1")  # and its indexes, made again by migrate()


def _stored_version(db: sqlite3.Connection, path: Path) -> int | None:
    """The store's schema_version (None: none written yet); SchemaVersionError for one this code
    cannot read: newer (written by a later harp), or not a version at all."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return None
    text = str(row[0])
    # At most 9 digits: int() refuses some 4,300 and more, and no version will need 10.
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and int(text) >= 1):
        damaged = "is no schema version: its meta table is damaged"
        raise SchemaVersionError(f"{path}: schema_version {text[:40]!r} {damaged}")
    if int(text) > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{path}: schema_version {text!r} is newer than this harp reads ({SCHEMA_VERSION}): upgrade harp"
        )
    return int(text)
