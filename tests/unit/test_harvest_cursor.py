"""The harvest cursor: a window read without a job moves it to its end, so an idle cluster or a
new store is not read again from its last job on every run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.commands.harvest import FIRST_RUN_DAYS
from tests.unit.test_harvest import DAY, HOUR, NOW, UtcSacct, _harvest, _t


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "jobs.sqlite") as s:
        yield s


def test_a_store_without_a_job_is_read_from_its_last_run_on(store: JobStore) -> None:
    """A new cluster where nothing has ended yet: every 5-minute run read the 30 days again, 30
    sacct calls. Now the next run reads from its last window's end less the overlap, as after a
    job ending there."""
    first = UtcSacct([])
    assert _harvest(store, first, window_s=DAY).windows == FIRST_RUN_DAYS
    assert store.cursor("c1") == NOW - 60
    later = UtcSacct([])
    assert _harvest(store, later, now=NOW + 300, window_s=DAY).windows == 1
    assert (_t(later.calls[0], "-S"), _t(later.calls[0], "-E")) == (NOW - 60 - HOUR, NOW + 240)


def test_an_idle_cluster_is_read_from_its_last_run_on(store: JobStore) -> None:
    """The last job ended 20 days ago: each run read the 21 days since, 21 sacct calls (and the
    job again by id)."""
    sacct = UtcSacct([NOW - 20 * DAY])
    _harvest(store, sacct, window_s=DAY)
    assert store.count("c1") == 1 and store.cursor("c1") == NOW - 60
    sacct.calls.clear()
    report = _harvest(store, sacct, now=NOW + 300, window_s=DAY)
    assert report.windows == len(sacct.calls) == 1 and _t(sacct.calls[0], "-S") == NOW - 60 - HOUR


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
