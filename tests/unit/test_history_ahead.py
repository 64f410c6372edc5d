"""Job-store rows whose end is ahead of the daemon's clock (a controller clock that ran ahead): the
history feed holds them back until their end has passed, as training's sweep does."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.config import HistorySettings
from slurm_harp.core.history import USER_JOBS, history_matrix, is_cold
from slurm_harp.core.job import JobRecord
from slurm_harp.core.key_history import log_count
from slurm_harp.core.request import JobRequest
from slurm_harp.server.history_feed import HistoryFeed

NOW = int(time.time())
DAY = 86400


def ended(job_id: str, user: str, end: int, elapsed: int = 600) -> JobRecord:
    request = JobRequest(
        user_name=user, account="phys", job_name="sim", time_limit_minutes=60, submit_time=end - elapsed - 10
    )
    return JobRecord(job_id=job_id, request=request, state="COMPLETED", elapsed_s=elapsed, end_time=end)


ALICE = [ended(f"a{i}", "alice", NOW - 3600 * i) for i in range(1, 11)]
# The damaged rows: another user of the account, and carol, whose only job is this one.
AHEAD = [ended("m", "mallory", NOW + 365 * DAY), ended("c", "carol", NOW + 365 * DAY)]


def as_trained(store: JobStore, user: str, at: int) -> np.ndarray:
    """The row training's sweep gives a submission of ``user`` at ``at`` over the whole store."""
    asked = JobRecord("x", JobRequest(user_name=user, account="phys", job_name="sim", submit_time=at), "", 0)
    return np.asarray(history_matrix([*store.records(), asked])[-1])


def served(feed: HistoryFeed, user: str, at: int) -> np.ndarray:
    return feed.row(JobRequest(user_name=user, account="phys", job_name="sim"), at)


def test_jobs_ending_ahead_of_the_clock_count_once_their_end_has_passed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="slurm_harp.server.history_feed")
    clock = [float(NOW)]
    feed = HistoryFeed(HistorySettings(db=tmp_path / "jobs.sqlite", poll_seconds=60), clock=lambda: clock[0])
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge([*AHEAD, *ALICE], "sacct")
        feed.refresh(store)  # the first read: a rebuild
        assert feed.rebuilds == 1 and feed.held_back == 2
        alice = served(feed, "alice", NOW)
        assert alice[USER_JOBS] == log_count(10), "alice's real jobs are kept"
        assert is_cold(served(feed, "carol", NOW)), "a job not ended yet makes no one warm"
        for user in ("alice", "carol"):
            np.testing.assert_array_equal(served(feed, user, NOW), as_trained(store, user, NOW))

        # Added by a poll (not a rebuild): one more ahead, one more of alice's.
        store.merge([ended("d", "dave", NOW + 2 * DAY), ended("a0", "alice", NOW - 60)], "sacct")
        feed.refresh(store)
        assert feed.rebuilds == 1 and feed.held_back == 3
        assert served(feed, "alice", NOW)[USER_JOBS] == log_count(11)
        assert is_cold(served(feed, "dave", NOW))

        clock[0] = NOW + 2 * DAY + 1  # dave's job has ended now; the year-ahead ones have not
        feed.refresh(store)
        at = int(clock[0])
        assert feed.held_back == 2 and not is_cold(served(feed, "dave", at))
        for user in ("alice", "carol", "dave"):
            np.testing.assert_array_equal(served(feed, user, at), as_trained(store, user, at))
    said = [r for r in caplog.records if r.levelno == logging.WARNING and "ahead" in r.getMessage()]
    assert len(said) == 1 and "2 jobs" in said[0].getMessage(), "said once, with a count"


def test_a_job_a_few_seconds_ahead_counts_at_once(tmp_path: Path) -> None:
    """Two hosts' clocks differ by seconds: such a job is not held back."""
    settings = HistorySettings(db=tmp_path / "jobs.sqlite", poll_seconds=60)
    feed = HistoryFeed(settings, clock=lambda: float(NOW))
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge([replace(ALICE[0], end_time=NOW + 5)], "sacct")
        feed.refresh(store)
    assert feed.held_back == 0 and feed.index.added == 1
