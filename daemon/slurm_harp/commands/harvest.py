"""`harp harvest`: finished jobs from live sacct into the job store, resuming from a per-source cursor.

Each run reads the jobs that ENDED in [cursor - overlap, now - settle], window by window (one sacct
call, then the window's jobs again by id for all their steps, sacct_runner.read_steps; one
transaction each, which moves the cursor too). Where the cursor starts and where each window
leaves it, and so which late rows are still read, is harvest_cursor.py's.
- settle: accounting fills in late (Partition and TimelimitRaw stay empty for seconds after a job
  ends), so the newest jobs are left for the next run.
- overlap: jobs near the cursor are read again: the upsert completes rows read half-filled, and a
  row that reached accounting late is still read (within a week of its job's end after windows
  that read none, about the overlap behind rows already stored: harvest_cursor.py).
sacct runs in UTC (sacct_runner.run_sacct): the windows are given to it, and its times read, in UTC; local
time would repeat an hour when clocks go back.
A job id met again with another submit time (ids reused, a requeued job's next run) is stored as a
job of its own (store_schema.py) and counted in one log line per run.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurm_harp.accounting import ReadStats, extension_file, sacct_runner
from slurm_harp.accounting.jobstore import CursorError, JobStore, SchemaVersionError, storable, store_error
from slurm_harp.accounting.sacct_runner import ENDED_STATES, SacctRunner, harvest_sacct, sacct_time
from slurm_harp.accounting.upsert import CURSOR_FIRST
from slurm_harp.commands.arguments import config_or_default, settings_at, span, unix_time
from slurm_harp.commands.harvest_cursor import (
    FIRST_RUN_DAYS,
    ClockNotSetError,
    cursor_at_start,
    reads_from,
    step_back,
    window_cursor,
)
from slurm_harp.config import DEFAULT_PATH

log = logging.getLogger(__name__)

DEFAULT_DB = "/var/lib/slurm-harp/jobs.sqlite"
RESUMES = " (stopped early: the next run resumes)"
# The shortest window: --window-hours 1e-9 made windows of a second, a first run 2.6 million sacct calls.
MIN_WINDOW_S = 60


def default_db() -> str:
    return os.environ.get("HARP_DB") or DEFAULT_DB


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("harvest", help="add jobs that ended since the last harvest to the job store")
    p.add_argument(
        "--db",
        default=None,
        help=f"job store (default: $HARP_DB, else --config's [history] db, else {DEFAULT_DB})",
    )
    p.add_argument(
        "--config",
        default=None,
        help=f"the daemon's config, read for its [history] db (default: {DEFAULT_PATH} when it exists)",
    )
    p.add_argument("--source-name", default="sacct", help="source key in the store (default: %(default)s)")
    p.add_argument(
        "--overlap-minutes",
        type=span(60, zero=True),
        default=60.0,
        help="re-read before the cursor (%(default)s)",
    )
    p.add_argument(
        "--settle-seconds",
        type=span(1, zero=True),
        default=60.0,
        help="skip jobs that ended this recently (%(default)s)",
    )
    p.add_argument(
        "--start",
        type=_local_time,
        default=None,
        help="read from this time (ISO, local unless it has an offset), even with a cursor (a damaged "
        f"one too); default: the cursor, or {FIRST_RUN_DAYS} days ago on the first run",
    )
    p.add_argument(
        "--window-hours",
        type=span(3600, least_s=MIN_WINDOW_S),
        default=24.0,
        help="span of one sacct call, at least a minute (%(default)s)",
    )
    p.set_defaults(func=run)


def _local_time(text: str) -> int:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO time: {text!r} (e.g. 2026-10-01T08:00)") from None
    start = unix_time(at, text)  # naive = local: an admin's clock
    if start < CURSOR_FIRST:  # it becomes the cursor, which would then be refused
        raise argparse.ArgumentTypeError(f"before 2000-01-01 UTC, older than any Slurm accounting: {text!r}")
    return start


@dataclass
class HarvestReport:
    source: str
    windows: int = 0
    inserted: int = 0
    updated: int = 0
    reused: int = 0
    cursor_before: int | None = None
    cursor: int | None = None

    def summary(self, stats: ReadStats) -> str:
        cursor = "none" if self.cursor is None else sacct_time(self.cursor) + " UTC"
        moved = "" if self.cursor == self.cursor_before else " (moved)"
        return (
            f"harvest {self.source}: {self.windows} windows, {stats.lines} lines, {stats.records} jobs, "
            f"{stats.bad_lines} bad lines, {self.inserted} new, {self.updated} updated, "
            f"cursor {cursor}{moved}"
        )


def windows(start: int, end: int, span: int) -> list[tuple[int, int]]:
    """[start, end] cut into consecutive spans; sacct's bounds are inclusive, so ends repeat."""
    out = []
    while start < end:
        out.append((start, min(start + span, end)))
        start += span
    return out


def harvest(
    store: JobStore,
    runner: SacctRunner,
    *,
    source: str,
    now: int,
    overlap_s: int,
    settle_s: int,
    start: int | None = None,
    window_s: int = 86400,
    stats: ReadStats | None = None,
    report: HarvestReport | None = None,
) -> HarvestReport:
    """Harvest into ``store``; ``report`` and ``stats`` (if given) are filled as windows complete."""
    stats = stats if stats is not None else ReadStats(source="sacct")
    report = report if report is not None else HarvestReport(source)
    end = now - settle_s
    cursor = cursor_at_start(store, source, start, now=now, overlap_s=overlap_s, end=end)
    report.cursor_before = report.cursor = cursor
    if cursor is not None and cursor > end:
        cursor = report.cursor = step_back(store, source, cursor, end)
    if start is None:
        start = reads_from(cursor, now=now, overlap_s=overlap_s)
    for low, high in windows(start, end, max(1, window_s)):
        stats.source = f"sacct[{sacct_time(low)}..{sacct_time(high)} UTC]"
        records = harvest_sacct(runner, sacct_time(low), sacct_time(high), stats, states=ENDED_STATES)
        ends = [r.end_time for r in records if r.end_time is not None]
        result = store.merge(records, source, cursor=window_cursor(ends, high, now=now, window_s=window_s))
        report.windows += 1
        report.inserted += result.inserted
        report.updated += result.updated
        report.reused += result.reused
        report.cursor = store.cursor(source)
    if report.reused:
        log.warning(
            "harvest %s: %d new jobs have the id of a job already stored, with another submit time "
            "(ids given again after MaxJobId wrapped or slurmctld lost its StateSaveLocation, or a "
            "requeued job's next run); each is stored as a job of its own",
            source,
            report.reused,
        )
    return report


def store_path(db: str | None, config: str | None) -> str | None:
    """The job store to harvest into: ``db`` (--db), else $HARP_DB, else the ``[history] db`` of
    ``config`` (default: the daemon's usual path when it exists; the store the daemon, the guard and
    the nightly read), else DEFAULT_DB; None when that configuration does not load (logged)."""
    if db or os.environ.get("HARP_DB"):
        return db or default_db()
    path = config_or_default(config)
    if path is None:
        return DEFAULT_DB
    settings = settings_at(path)
    if settings is None:
        return None
    return DEFAULT_DB if settings.history.db is None else str(settings.history.db)


def run(args: argparse.Namespace) -> int:
    db = store_path(args.db, args.config)
    if db is None:
        return 2
    done = harvest_into(
        db,
        source=storable(args.source_name),  # SQLite stores no surrogate: every run failed on one
        overlap_s=int(args.overlap_minutes * 60),
        settle_s=int(args.settle_seconds),
        start=args.start,
        window_s=int(args.window_hours * 3600),
    )
    return 0 if done else 1


def harvest_into(
    db: str, *, source: str, overlap_s: int, settle_s: int, start: int | None = None, window_s: int = 86400
) -> bool:
    """Harvest live sacct into the job store at ``db`` and print the summary; False (logged) when
    it stopped early (what was committed stays: the next run resumes, unless the store itself is
    damaged, which the log line says), or did not start: a store of a schema this harp cannot read."""
    stats = ReadStats(source=f"job store {db}")
    report = HarvestReport(source)
    now = int(time.time())
    try:
        with JobStore(db) as store:
            stats.source = "sacct"
            harvest(
                store,
                sacct_runner.run_sacct,  # the one subprocess boundary for sacct
                source=source,
                now=now,
                overlap_s=overlap_s,
                settle_s=settle_s,
                start=start,
                window_s=window_s,
                stats=stats,
                report=report,
            )
            # What `harp guard` extends by: refreshed from the store, new jobs or not (the window moves).
            stats.source = "extension history"
            ratios = extension_file.ratios_from(store, now)
            extension_file.write(extension_file.path_for(Path(db)), ratios, now)
    except (SchemaVersionError, CursorError, ClockNotSetError) as exc:  # before any sacct call
        log.error("harvest not started: %s", exc)
        return False
    except sqlite3.Error as exc:  # the store's, whichever step met it (a window's merge too)
        problem, resumes = store_error(db, exc)
        log.error("harvest stopped: %s", problem)
        print(report.summary(stats) + (RESUMES if resumes else " (stopped: the job store is unusable)"))
        return False
    except (OSError, ValueError, ArithmeticError, RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("harvest stopped at %s: %s", stats.source, exc)
        print(report.summary(stats) + RESUMES)
        return False
    print(report.summary(stats) + f", {len(ratios)} jobs in the extension history")
    return True
