"""The harvest cursor's rules (commands.harvest): where a run reads from, and where each window it
reads leaves the cursor.

A run reads from its source's cursor less the overlap, or FIRST_RUN_DAYS ago without one. Each
window moves the cursor forward (upsert._advance) in the transaction that stores its jobs, so a
crash or a failing sacct loses nothing and the next run resumes from there (window_cursor):
- to the latest End seen, never past the window asked for (a clock ahead on the DBD host must not
  skip later jobs). Accounting that lags or stalls sends rows in End order, and the window read
  again holds the last job seen, so the cursor waits for them.
- for a window read without a job, to its end, but a week (EMPTY_WINDOW_BACK_S; a window, if
  longer) short of now at the latest: an idle cluster or a new store costs a run a week's windows
  (where it read every window since the last job, 30 for a new store), and rows queued through an
  outage of up to a week, arriving in End order after windows that read none, are still read.
So a job's row that reaches accounting late is read if it comes within a week of the job's end and
before a job that ended more than the overlap after it is harvested (on a busy site in steady state,
within about the overlap); later, it is missed: after such an outage, give --start.

Otherwise (cursor_at_start, step_back): a host clock before 2000 (not set yet after boot) stops the
run; a cursor no harvest sets (a damaged state table: text, 0) stops it before sacct, naming it and
the --start that reads past it, and --start replaces it; a cursor later than now - settle was set
by a run whose clock was ahead (the controller's, which stamps the jobs' End too, stepped back
since), and is set back to now - settle, with a warning naming how far ahead it was.
"""

from __future__ import annotations

import logging
import shlex

from slurm_harp.accounting.jobstore import CursorError, JobStore
from slurm_harp.accounting.sacct_runner import sacct_time
from slurm_harp.accounting.upsert import CURSOR_FIRST
from slurm_harp.core.message import format_minutes

log = logging.getLogger(__name__)

FIRST_RUN_DAYS = 30
# How close to now a window read without a job may move the cursor (window_cursor).
EMPTY_WINDOW_BACK_S = 7 * 86400


class ClockNotSetError(ValueError):
    """This host's clock reads before 2000 (not set yet after boot): the cursor is sound, but every
    one this run set would be refused by the next, and the clock-step rule set it back there."""


def reads_from(cursor: int | None, *, now: int, overlap_s: int) -> int:
    """Where a run without --start reads from: ``cursor`` less the overlap, or FIRST_RUN_DAYS ago
    without one."""
    return now - FIRST_RUN_DAYS * 86400 if cursor is None else cursor - overlap_s


def cursor_at_start(
    store: JobStore, source: str, start: int | None, *, now: int, overlap_s: int, end: int
) -> int | None:
    """The cursor of ``source`` for a run reading up to ``end`` (now - settle); ClockNotSetError
    when ``end`` is before 2000. A damaged one (CursorError) stops the run before sacct, saying the
    --start that reads past it: the latest End of this source's jobs less the overlap (where a sound
    cursor would have the run read from; another source's, an imported trace's or another cluster's,
    had it read from 1996 or skip this one's jobs), else what a first run reads; run as the harvest's
    user, as a sacct of another user may show only their own jobs (PrivateData). Given ``start``
    (--start), it is replaced at once by ``start``, ``end`` at the latest: left to a window, a start
    past the run's end read none and left it damaged. A window that fails then loses nothing: the
    next run reads from ``start`` less the overlap."""
    if end < CURSOR_FIRST:
        raise ClockNotSetError(f"this host's clock reads {sacct_time(now)} UTC, before 2000 (not set yet?)")
    try:
        return store.cursor(source)
    except CursorError as exc:
        if start is not None:
            log.warning("harvest %s: %s: replaced by --start", source, exc)
            store.set_cursor(source, min(start, end))
            return min(start, end)
        latest = store.latest_end(now, source)
        at = max(reads_from(latest, now=now, overlap_s=overlap_s), CURSOR_FIRST)
        command = f"harp harvest --db {shlex.quote(str(store.path))} --source-name {shlex.quote(source)}"
        why = "a first run's start" if latest is None else "the source's latest job end, less the overlap"
        raise CursorError(
            f"{exc}. Run once, as the user the harvest runs as (slurm-harp by default), `{command} "
            f"--start {sacct_time(at)}Z`: it reads from then ({why}) and replaces the cursor; a job read "
            "again changes nothing"
        ) from None


def window_cursor(ends: list[int], high: int, *, now: int, window_s: int) -> int:
    """Where a window read up to ``high``, whose jobs ended at ``ends``, moves the cursor of a run
    at ``now`` reading windows of ``window_s``. Never before 2000, which the next run refuses."""
    if ends:
        return min(max(ends), high)
    # Never closer to now than a week (or a window, if longer): rows slurmctld queued through a
    # slurmdbd outage or a stall arrive in End order, after windows that read none; a cursor moved
    # up to a window short of now lost those that ended before it (a weekend's outage).
    return max(min(high, now - max(window_s, EMPTY_WINDOW_BACK_S)), CURSOR_FIRST)


def step_back(store: JobStore, source: str, cursor: int, end: int) -> int:
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
