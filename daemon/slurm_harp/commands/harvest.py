"""`harp harvest`: finished jobs from live sacct into the job store, resuming from a per-source cursor.

Each run reads the jobs that ENDED in [cursor - overlap, now - settle], window by window (one sacct
call, then the window's jobs again by id for all their steps, sacct_runner.read_steps; one
transaction each). The cursor is the latest End seen, or the end of a window read without a job
but a window short of now at the latest (an idle cluster, a new store: a run reads a window and the
overlap, where it read every window since the last job); it moves in the same transaction as the
rows, so a crash or a failing sacct loses nothing and the next run resumes from there. A cursor no
harvest sets (a damaged state table: text, 0) stops the run before sacct, naming it and the
--start that reads past it (_cursor).
- settle: accounting fills in late (Partition and TimelimitRaw stay empty for seconds after a job
  ends), so the newest jobs are left for the next run.
- overlap: jobs near the cursor are read again, and the upsert completes rows read half-filled.
  A job's row that reaches accounting late is read if it comes within a window plus the overlap
  of the job's end and before a job that ended more than the overlap after it is harvested (on a
  busy site, within about the overlap); later, it is missed: after such an outage, give --start.
The cursor only moves forward, but for one case: a cursor later than now - settle was set by a run
whose clock was ahead (the controller's, which stamps the jobs' End too, stepped back since). It is
set back to now - settle, with a warning naming how far ahead it was (_step_back).
sacct runs in UTC (sacct_runner.run_sacct): the windows are given to it, and its times read, in UTC; local
time would repeat an hour when clocks go back.
A job id met again with another submit time (ids reused, a requeued job's next run) is stored as a
job of its own (store_schema.py) and counted in one log line per run.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurm_harp.accounting import ReadStats, extension_file, sacct_runner
from slurm_harp.accounting.jobstore import CursorError, JobStore, SchemaVersionError, storable, store_error
from slurm_harp.accounting.sacct_runner import ENDED_STATES, SacctRunner, harvest_sacct
from slurm_harp.accounting.upsert import CURSOR_FIRST
from slurm_harp.commands.arguments import config_or_default, settings_at, span, unix_time
from slurm_harp.config import DEFAULT_PATH
from slurm_harp.core.message import format_minutes

log = logging.getLogger(__name__)

DEFAULT_DB = "/var/lib/slurm-harp/jobs.sqlite"
FIRST_RUN_DAYS = 30
RESUMES = " (stopped early: the next run resumes)"
# The shortest window: --window-hours 1e-9 made windows of a second, a first run 2.6 million sacct calls.
MIN_WINDOW_S = 60


class ClockNotSetError(ValueError):
    """This host's clock reads before 2000 (not set yet after boot): the cursor is sound, but every
    one this run set would be refused by the next, and the clock-step rule set it back there."""


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


def sacct_time(t: int) -> str:
    """Unix time ``t`` as sacct's -S/-E read it under run_sacct: in SLURM_ZONE (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


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
    if end < CURSOR_FIRST:
        raise ClockNotSetError(f"this host's clock reads {sacct_time(now)} UTC, before 2000 (not set yet?)")
    cursor = _cursor(store, source, start, now=now, overlap_s=overlap_s, end=end)
    report.cursor_before = report.cursor = cursor
    if cursor is not None and cursor > end:
        cursor = report.cursor = _step_back(store, source, cursor, end)
    if start is None:
        start = now - FIRST_RUN_DAYS * 86400 if cursor is None else cursor - overlap_s
    for low, high in windows(start, end, max(1, window_s)):
        stats.source = f"sacct[{sacct_time(low)}..{sacct_time(high)} UTC]"
        records = harvest_sacct(runner, sacct_time(low), sacct_time(high), stats, states=ENDED_STATES)
        ends = [r.end_time for r in records if r.end_time is not None]
        # The latest End seen, never past the window asked for (a clock ahead on the DBD host must
        # not skip later jobs): accounting that lags or stalls sends rows in End order, and the
        # window read again holds the last job seen. A window without a job: its end, but a window
        # short of now at the latest, so a row up to a window late is still read (at its end, one
        # an hour late after an idle day was lost); never before 2000, which the next run refuses.
        quiet = max(min(high, now - window_s), CURSOR_FIRST)
        result = store.merge(records, source, cursor=min(max(ends), high) if ends else quiet)
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


def _cursor(
    store: JobStore, source: str, start: int | None, *, now: int, overlap_s: int, end: int
) -> int | None:
    """The cursor of ``source``. A damaged one (CursorError) stops the run before sacct, saying the
    --start that reads past it: the latest End of this source's jobs less the overlap (where a sound
    cursor would have the run read from; another source's, an imported trace's or another cluster's,
    had it read from 1996 or skip this one's jobs), else what a first run reads; run as the harvest's
    user, as a sacct of another user may show only their own jobs (PrivateData). Given ``start``
    (--start), it is replaced at once by ``start``, ``end`` (now - settle) at the latest: left to a
    window, a start past the run's end read none and left it damaged. A window that fails then
    loses nothing: the next run reads from ``start`` less the overlap."""
    try:
        return store.cursor(source)
    except CursorError as exc:
        if start is not None:
            log.warning("harvest %s: %s: replaced by --start", source, exc)
            store.set_cursor(source, min(start, end))
            return min(start, end)
        latest = store.latest_end(now, source)
        at = now - FIRST_RUN_DAYS * 86400 if latest is None else max(latest - overlap_s, CURSOR_FIRST)
        command = f"harp harvest --db {shlex.quote(str(store.path))} --source-name {shlex.quote(source)}"
        why = "a first run's start" if latest is None else "the source's latest job end, less the overlap"
        raise CursorError(
            f"{exc}. Run once, as the user the harvest runs as (slurm-harp by default), `{command} "
            f"--start {sacct_time(at)}Z`: it reads from then ({why}) and replaces the cursor; a job read "
            "again changes nothing"
        ) from None


def _step_back(store: JobStore, source: str, cursor: int, end: int) -> int:
    """The cursor set back to ``end`` (now - settle), logged: a cursor past it was set by a run
    whose clock was ahead of this one's. The harvest runs on the controller (docs/install.md), so
    slurmctld stamped the jobs' End with the same clock: those ended since it stepped back end
    before the cursor, and a cursor kept (it never moved back) skipped them for good. Set back,
    the run reads from ``end`` - overlap as any other; the jobs stamped ahead are read when the
    clock reaches their End, and a job read again merges into its row (the store's identity)."""
    log.warning(
        "harvest %s: the cursor, %s UTC, is %s ahead of this host's clock less the settle time "
        "(%s UTC): the clock stepped back since it was set (or the settle time grew); setting it "
        "back and reading from there",
        source,
        sacct_time(cursor),
        format_minutes((cursor - end) / 60),
        sacct_time(end),
    )
    store.set_cursor(source, end)
    return end


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
