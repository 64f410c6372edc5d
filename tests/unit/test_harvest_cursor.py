"""The harvest cursor: a damaged one (text, 0, out of range) is refused where it is read, before
sacct, with the --start that reads past it; a window read without a job moves it to its end but a
window short of now at the latest, so an idle cluster or a new store is not read again from its
last job on every run, and a row late by up to about a window is still read."""

from __future__ import annotations

import logging
import re
import shlex
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.accounting import load_records
from slurm_harp.accounting import sacct_runner as sacct_module
from slurm_harp.accounting.jobstore import CursorError, JobStore
from slurm_harp.accounting.sacct_runner import sacct_time
from slurm_harp.cli import main
from slurm_harp.commands.harvest_cursor import EMPTY_WINDOW_BACK_S, FIRST_RUN_DAYS, ClockNotSetError
from tests.conftest import BUNDLED_TRACE
from tests.unit.test_harvest import DAY, HOUR, LAST_END, NOW, TEXT, FakeSacct, UtcSacct, _harvest, _t

ALL_AT_ONCE = ["--window-hours", "87840"]  # one sacct call for the whole span
DAMAGED = ["garbled", 0, -1, 1_700_000_000.5, 10**13]  # text, 1970, negative, no whole number, year 318857


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "jobs.sqlite") as s:
        yield s


def damage(db: Path, value: object, source: str = "sacct") -> None:
    """Write ``value`` over the cursor of ``source``, as a hand edit or a damaged page would."""
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE state SET cursor_end = ? WHERE source = ?", (value, source))
    raw.close()


def _stored(tmp_path: Path) -> Path:
    """A job store holding TEXT's jobs under source "sacct", its cursor at LAST_END."""
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        _harvest(store, FakeSacct(TEXT), source="sacct")
        assert store.cursor("sacct") == LAST_END
    return db


@pytest.mark.parametrize("value", DAMAGED, ids=str)
def test_a_cursor_no_harvest_sets_is_refused_naming_the_store_source_and_value(
    tmp_path: Path, value: object
) -> None:
    """int() took 0 and -1 as they were, 1.7e9 + 0.5 cut to a whole number, and "garbled" raised
    its own ValueError naming nothing."""
    db = _stored(tmp_path)
    damage(db, value)
    with JobStore(db) as store, pytest.raises(ValueError) as raised:
        store.cursor("sacct")
    assert str(raised.value) == (
        f"the job store {db}: the harvest cursor of source 'sacct' is {value!r}, no time a harvest sets "
        "(whole unix seconds from 2000-01-01 to 9999-12-31 UTC): its state table is damaged"
    )


@pytest.mark.parametrize("value", DAMAGED, ids=str)
def test_a_damaged_cursor_stops_the_harvest_before_sacct_and_its_start_reads_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, value: object
) -> None:
    """Text failed every run for good, `harvest stopped at sacct: invalid literal for int()` and
    `the next run resumes` (it never did), and --start could not get past it; a cursor of 0 had a
    run read every day since 1970, 20,789 sacct calls (every run, while sacct held no job). Now: no
    sacct call, the store, source and value named, and the --start to run once; run, it replaces
    the cursor and the runs after resume."""
    db = _stored(tmp_path)
    damage(db, value)
    refused = FakeSacct(RuntimeError("sacct must not run"))
    monkeypatch.setattr(sacct_module, "run_sacct", refused)
    with caplog.at_level(logging.ERROR):
        assert main(["harvest", "--db", str(db)]) == 1
    assert refused.calls == refused.step_calls == []
    assert "at sacct" not in caplog.text
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith(f"harvest not started: the job store {db}: the harvest cursor of source 'sacct'")
    start = sacct_time(LAST_END - HOUR)  # the latest End stored, less the overlap
    command = f"harp harvest --db {db} --source-name sacct --start {start}Z"
    user = "as the user the harvest runs as (slurm-harp by default)"
    assert f"its state table is damaged. Run once, {user}, `{command}`: it reads from then (" in line

    quoted = re.search(r"`(harp harvest [^`]*)`", line)
    assert quoted is not None
    sacct = FakeSacct(TEXT)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    assert main([*shlex.split(quoted.group(1))[1:], *ALL_AT_ONCE]) == 0
    assert _t(sacct.calls[0], "-S") == LAST_END - HOUR
    with JobStore(db) as store:
        assert store.cursor("sacct") == LAST_END and store.count("sacct") == 7
    assert main(["harvest", "--db", str(db), *ALL_AT_ONCE]) == 0  # and the timer's runs resume


def test_a_damaged_cursor_of_a_store_without_a_job_names_a_first_run_s_start(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        store.set_cursor("c1", NOW)
    damage(db, "garbled", "c1")
    with JobStore(db) as store, pytest.raises(ValueError) as raised:
        _harvest(store, FakeSacct(TEXT))
    start = sacct_time(NOW - FIRST_RUN_DAYS * DAY)
    message = str(raised.value)
    assert f"--source-name c1 --start {start}Z`: it reads from then (a first run's start)" in message


def _start_named(raised: pytest.ExceptionInfo[CursorError]) -> int:
    """The --start the refusal names, in unix seconds."""
    start = re.search(r"--start (\S+)Z`", str(raised.value))
    assert start is not None
    return _t(["-S", start.group(1)], "-S")


def test_a_damaged_cursor_s_start_is_not_an_imported_trace_s(tmp_path: Path) -> None:
    """The --start named was the latest End of any source: in a store holding the bundled KTH-SP2
    trace (1996) beside a new cluster's source, 2000-01-01, a run of 9,838 sacct calls. Now that
    source's own latest End, and here it has none: a first run's start."""
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        store.merge(load_records(BUNDLED_TRACE)[:100], "kth")
        _harvest(store, UtcSacct([]), source="sacct", window_s=DAY)  # a new cluster: a cursor, no job
    damage(db, "garbled")
    with JobStore(db) as store:
        with pytest.raises(CursorError) as raised:
            _harvest(store, UtcSacct([]), source="sacct")
        assert _start_named(raised) == NOW - FIRST_RUN_DAYS * DAY
        assert "it reads from then (a first run's start)" in str(raised.value)
        sacct = UtcSacct([])
        _harvest(store, sacct, source="sacct", start=_start_named(raised), window_s=DAY)
        assert len(sacct.calls) == FIRST_RUN_DAYS and store.cursor("sacct") is not None


def test_a_damaged_cursor_s_start_is_not_another_cluster_s(store: JobStore) -> None:
    """Two clusters harvested into one store, a job an hour on c1: c1's cursor damaged while c2
    went on. The --start named was c2's latest End less the overlap, and the 69 c1 jobs that ended
    between were never read. Now c1's latest End less the overlap: every c1 job is read."""
    c1_ends = [NOW - 5 * DAY + k * HOUR for k in range(5 * 24 - 2)]
    _harvest(store, UtcSacct([e for e in c1_ends if e <= NOW - 3 * DAY]), source="c1", now=NOW - 3 * DAY)
    _harvest(store, UtcSacct([NOW - 2 * HOUR]), source="c2")
    damage(store.path, "x", "c1")
    with pytest.raises(CursorError) as raised:
        _harvest(store, UtcSacct(c1_ends), source="c1")
    assert _start_named(raised) == NOW - 3 * DAY - HOUR - HOUR  # c1's last job stored, less the overlap
    assert "(the source's latest job end, less the overlap)" in str(raised.value)
    _harvest(store, UtcSacct(c1_ends), source="c1", start=_start_named(raised))
    assert sorted(r.end_time or 0 for r in store.records("c1")) == c1_ends


def test_start_replaces_a_damaged_cursor_at_once_and_a_failing_window_loses_nothing(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Left to the first window stored, a sacct that failed left the cursor damaged: the timer's
    runs after it were refused again."""
    store.set_cursor("c1", NOW)
    damage(store.path, "garbled", "c1")
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="unreachable"):
        _harvest(store, FakeSacct(RuntimeError("sacct exited 1: slurmdbd unreachable")), start=LAST_END - DAY)
    assert store.cursor("c1") == LAST_END - DAY
    assert "'garbled', no time a harvest sets" in caplog.text and "replaced by --start" in caplog.text
    sacct = FakeSacct(TEXT)
    report = _harvest(store, sacct)  # the timer's next run reads from --start less the overlap
    assert _t(sacct.calls[0], "-S") == LAST_END - DAY - HOUR
    assert report.cursor == store.cursor("c1") == LAST_END and store.count("c1") == 7


def test_a_start_past_the_run_s_end_still_replaces_a_damaged_cursor(store: JobStore) -> None:
    """--overlap-minutes 0 and a job that ended within the settle time: the --start named is past
    the end of the run given it (now - settle). That run read no window, exited 0 and left the
    cursor damaged, though the message said it replaces it."""
    _harvest(store, UtcSacct([NOW - 20]), source="sacct", settle_s=0, overlap_s=0)
    damage(store.path, "garbled")
    with pytest.raises(CursorError) as raised:
        _harvest(store, UtcSacct([NOW - 20]), source="sacct", now=NOW + 5, overlap_s=0)
    assert _start_named(raised) == NOW - 20
    sacct = UtcSacct([NOW - 20])
    report = _harvest(store, sacct, source="sacct", start=NOW - 20, now=NOW + 10, overlap_s=0)
    assert sacct.calls == [] and report.cursor == store.cursor("sacct") == NOW + 10 - 60  # its end
    _harvest(store, sacct, source="sacct", now=NOW + 300, overlap_s=0)  # and the timer's runs resume
    assert store.count("sacct") == 1 and store.cursor("sacct") == NOW - 20


def test_a_clock_before_2000_harvests_nothing_and_keeps_the_cursor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A host whose clock was not set yet (1970 after boot): the clock-step rule set the cursor back
    to it, and the run after it read every day since 1970. Refused as the clock's, not the cursor's
    (a CursorError, with the cursor sound)."""
    db = _stored(tmp_path)
    sacct = FakeSacct(TEXT)
    with (
        JobStore(db) as store,
        pytest.raises(ClockNotSetError, match=r"reads 1970-01-02T03:46:40 UTC, before 2000"),
    ):
        _harvest(store, sacct, source="sacct", now=100_000)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    monkeypatch.setattr(time, "time", lambda: 100.0)  # the harvest's clock
    with caplog.at_level(logging.ERROR):
        assert main(["harvest", "--db", str(db)]) == 1
    assert caplog.messages == [
        "harvest not started: this host's clock reads 1970-01-01T00:01:40 UTC, before 2000 (not set yet?)"
    ]
    assert sacct.calls == []
    with JobStore(db) as store:
        assert store.cursor("sacct") == LAST_END


def test_a_store_without_a_job_is_read_from_a_window_before_its_last_run_on(store: JobStore) -> None:
    """A new cluster where nothing has ended yet: every 5-minute run read the 30 days again, 30
    sacct calls. Now a week short of the last run's clock, less the overlap: 8 calls."""
    first = UtcSacct([])
    assert _harvest(store, first, window_s=DAY).windows == FIRST_RUN_DAYS
    assert store.cursor("c1") == NOW - EMPTY_WINDOW_BACK_S
    later = UtcSacct([])
    assert _harvest(store, later, now=NOW + 300, window_s=DAY).windows == 8
    assert (_t(later.calls[0], "-S"), _t(later.calls[-1], "-E")) == (NOW - 7 * DAY - HOUR, NOW + 240)


def test_an_idle_cluster_is_read_from_a_window_before_its_last_run_on(store: JobStore) -> None:
    """The last job ended 20 days ago: each run read the 21 days since, 21 sacct calls (and the
    job again by id). Now a week's: 8."""
    sacct = UtcSacct([NOW - 20 * DAY])
    _harvest(store, sacct, window_s=DAY)
    assert store.count("c1") == 1 and store.cursor("c1") == NOW - 7 * DAY
    sacct.calls.clear()
    report = _harvest(store, sacct, now=NOW + 300, window_s=DAY)
    assert report.windows == len(sacct.calls) == 8 and _t(sacct.calls[0], "-S") == NOW - 7 * DAY - HOUR


def _every_5_minutes(store: JobStore, jobs: list[tuple[int, int]], first_run: int) -> None:
    """The timer's runs from ``first_run`` to NOW; ``jobs``: (End, when its row reaches accounting)."""
    sacct = UtcSacct([])
    for now in range(first_run, NOW, 300):
        sacct.ends = [end if arrives <= now else -1 for end, arrives in jobs]
        _harvest(store, sacct, now=now, window_s=DAY)


def test_a_row_an_hour_late_after_two_idle_days_is_read(store: JobStore) -> None:
    """A quiet site through a slurmdbd outage: no job for two days, then one whose row reaches
    accounting 70 minutes after it ended, past the overlap. At each empty window's end, the cursor
    had passed it and the row was lost; a window short of now, it is read, as a busy site's cursor
    waits at the last job seen."""
    end = NOW - 3 * HOUR
    _every_5_minutes(store, [(end - 2 * DAY, end - 2 * DAY), (end, end + 70 * 60)], end - 2 * DAY + 300)
    assert sorted(r.end_time or 0 for r in store.records("c1")) == [end - 2 * DAY, end]


def test_a_backlog_queued_through_a_two_day_outage_is_read_whole(store: JobStore) -> None:
    """The review: a busy site whose slurmdbd was down two days; slurmctld's queued rows reach
    accounting in End order, a few each run. With the cursor moved to a window short of now by the
    windows the first runs read without a job, every queued row that ended before it was lost."""
    down, back = NOW - 3 * DAY, NOW - DAY
    ends = range(down - 6 * HOUR, back, 1800)  # a job every half hour
    jobs = [(end, end if end < down else back + (end - down) // 30) for end in ends]  # 2 a minute
    _every_5_minutes(store, jobs, down - 6 * HOUR + 300)
    assert sorted(r.end_time or 0 for r in store.records("c1")) == list(ends)


def test_a_new_store_s_first_job_an_hour_late_is_read(store: JobStore) -> None:
    end = NOW - 3 * HOUR
    _every_5_minutes(store, [(end, end + 70 * 60)], end - 2 * HOUR)
    assert [r.end_time for r in store.records("c1")] == [end]


def test_two_harvests_at_once_on_an_idle_cluster_say_no_clock_stepped_back(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The timer's harvest and the nightly's started together, the second's clock read a second
    before the first committed: with the cursor at its last window's end (now - settle), the second
    found it ahead of its own clock and warned that the clock stepped back."""
    sacct = UtcSacct([NOW - 5 * DAY])
    _harvest(store, sacct, window_s=DAY)
    with caplog.at_level(logging.WARNING):
        _harvest(store, sacct, now=NOW - 1, window_s=DAY)
    assert "stepped back" not in caplog.text and store.cursor("c1") == NOW - 5 * DAY


def test_a_row_late_by_less_than_the_overlap_after_an_idle_spell_is_read(store: JobStore) -> None:
    """The overlap covers a late row as on a busy site: a job that ended before a run read its
    window, its row in accounting only after, is read by the next run."""
    _harvest(store, UtcSacct([]), window_s=DAY)  # nothing yet
    late = UtcSacct([NOW - 50 * 60])  # ended 50 minutes before that run, recorded since
    _harvest(store, late, now=NOW + 300, window_s=DAY)
    assert [r.end_time for r in store.records("c1")] == [NOW - 50 * 60]


def test_accounting_that_stalls_for_hours_is_read_whole_when_it_catches_up(store: JobStore) -> None:
    """A job ends every 5 minutes; slurmctld's rows stop reaching slurmdbd for 3 hours (past the
    overlap), then arrive in End order. The window read again holds the last job seen, so the
    cursor stays at its End (moved to the window's end, the stalled jobs were never read)."""
    start = NOW - 8 * HOUR
    ends = list(range(start, start + 6 * HOUR, 300))
    stall = range(start + 2 * HOUR, start + 5 * HOUR)
    sacct = UtcSacct([])
    for now in range(start + 120, start + 8 * HOUR, 300):
        sacct.ends = [end if end <= now and (now not in stall or end < stall.start) else -1 for end in ends]
        _harvest(store, sacct, now=now, settle_s=60, window_s=DAY)
    assert sorted(r.end_time or 0 for r in store.records("c1")) == ends
