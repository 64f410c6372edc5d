"""The daemon keeps job history from the harvester's job store: live features equal training's."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.config import ConfigError, HistorySettings, parse
from slurm_harp.core.features import REQUEST_FEATURE_NAMES
from slurm_harp.core.history import USER_JOBS, history_matrix
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.history_feed import REBUILD_AFTER_CHANGE_S, HistoryFeed
from tests.conftest import not_a_file
from tests.integration.harp_client import Client, target

NOW = int(time.time())
R = len(REQUEST_FEATURE_NAMES)


def finished(job_id: str, user: str, submit: int, elapsed: int = 1800) -> JobRecord:
    request = JobRequest(
        user_name=user,
        account="phys",
        job_name="relax",
        time_limit_minutes=600,
        min_cpus=1,
        submit_time=submit,
    )
    return JobRecord(
        job_id=job_id,
        request=request,
        state="COMPLETED",
        elapsed_s=elapsed,
        start_time=submit,
        end_time=submit + elapsed,
        total_cpu_s=float(elapsed),
        max_rss_mb=700.0,
    )


BOB = [finished(str(i), "bob", NOW - 6 * 3600 + 600 * i) for i in range(6)]
ASK: dict[str, Any] = {"account": "phys", "job_name": "relax", "time_limit_minutes": 24 * 60, "min_cpus": 32}


def make_daemon(tmp: Path, models: Path, db: Path, **policy: Any) -> Daemon:
    settings = parse(
        {
            "server": {"socket": str(tmp / "harp.sock")},
            "store": {"path": str(models)},
            "policy": {"mode": "rewrite", "floor": {"time_minutes": 5}, **policy},
            "history": {"db": str(db), "poll_seconds": 0.1},
        }
    )
    return Daemon(settings, CollectorRegistry())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.merge(BOB, "sacct")
    return path


@pytest.fixture
def running(tmp_path: Path, store_copy: Path, db: Path) -> Iterator[tuple[Daemon, Client]]:
    daemon = make_daemon(tmp_path, store_copy, db)
    daemon.start()
    client = Client(tmp_path / "harp.sock")
    yield daemon, client
    client.close()
    daemon.stop(grace=0)


class Probe:
    """Wraps the served model and keeps the feature rows it is given."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.rows: list[np.ndarray] = []
        self.version = model.version
        self.quantiles = model.quantiles

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray:
        self.rows.append(x.copy())
        return np.asarray(self.model.predict_quantile(x, quantile))


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_model_sees_the_history_training_would_compute(running: tuple[Daemon, Client], db: Path) -> None:
    daemon, client = running
    probe = Probe(daemon.predictor.models[Target.TIME])
    daemon.predictor.swap(models={Target.TIME: probe})
    reply = client.predict(user_name="bob", submit_time=NOW, **ASK)
    time_decision = target(reply, "time")
    # Bob has history: the model decides (rewrite or not), nothing stops at "cold user".
    assert time_decision.reason in (pb.REASON_UNSPECIFIED, pb.REASON_NO_GAIN)
    assert time_decision.HasField("predicted")
    # The submission as training will see it once it has run: a record after the store's jobs.
    submitted = JobRecord("new", JobRequest(user_name="bob", submit_time=NOW, **ASK), "", elapsed_s=0)
    with JobStore(db) as store:
        stored = list(store.records())
    expected = history_matrix([*stored, submitted])[-1]
    (seen,) = probe.rows
    np.testing.assert_array_equal(seen[0, R : R + len(expected)], expected)
    assert seen[0, R + USER_JOBS] == pytest.approx(np.log1p(len(BOB)), abs=1e-3)


def test_cold_user_is_annotated_until_their_first_job_is_harvested(
    running: tuple[Daemon, Client], db: Path
) -> None:
    _, client = running

    def carol() -> pb.TargetDecision:
        return target(client.predict(user_name="carol", submit_time=int(time.time()), **ASK), "time")

    cold = carol()
    assert cold.reason == pb.REASON_COLD_USER and cold.action == pb.ACTION_ANNOTATE
    assert cold.HasField("predicted") and not cold.HasField("new_value")
    with JobStore(db) as store:
        store.merge([finished("c1", "carol", NOW - 3600)], "sacct")
    assert wait_for(lambda: carol().reason != pb.REASON_COLD_USER)
    assert carol().action == pb.ACTION_REWRITE


def test_require_history_off_rewrites_cold_users(tmp_path: Path, store_copy: Path, db: Path) -> None:
    daemon = make_daemon(tmp_path, store_copy, db, require_history=False)
    daemon.start()
    try:
        with Client(tmp_path / "harp.sock") as client:
            decision = target(client.predict(user_name="carol", submit_time=NOW, **ASK), "time")
            # The policy's own rules decide (here the model is not sure enough to save 10 %).
            assert decision.reason in (pb.REASON_UNSPECIFIED, pb.REASON_NO_GAIN)
    finally:
        daemon.stop(grace=0)


def test_store_created_after_start_is_picked_up(tmp_path: Path, store_copy: Path) -> None:
    db = tmp_path / "later.sqlite"
    daemon = make_daemon(tmp_path, store_copy, db)
    daemon.start()
    try:
        assert not db.exists()  # the daemon does not create the harvester's database
        with Client(tmp_path / "harp.sock") as client:

            def bob() -> int:
                return int(target(client.predict(user_name="bob", submit_time=NOW, **ASK), "time").reason)

            assert bob() == pb.REASON_COLD_USER
            with JobStore(db) as store:
                store.merge(BOB, "sacct")
            assert wait_for(lambda: bob() != pb.REASON_COLD_USER)
    finally:
        daemon.stop(grace=0)


def test_a_replaced_store_is_reopened(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.merge(BOB, "sacct")
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=0.1))
    feed.start()
    try:
        assert feed.seeded.wait(10) and feed.index.added == len(BOB)
        restored = tmp_path / "restored.sqlite"
        with JobStore(restored) as store:
            store.merge([finished("e1", "erin", NOW - 600, elapsed=60)], "sacct")
        restored.replace(path)  # a restored backup, moved into place
        assert wait_for(lambda: feed.index.added == 1 and feed.rebuilds == 2)
        path.unlink()  # removed: what is known stays until a store is back
        time.sleep(0.5)
        assert feed.index.added == 1 and feed.rebuilds == 2
    finally:
        feed.stop()


def test_a_fifo_at_the_store_is_logged_once_and_a_store_moved_there_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # SQLite's open() of a FIFO would wait for a writer (the thread, for good). It is refused: every
    # poll fails the same way, which was logged with a full traceback each time.
    caplog.set_level(logging.DEBUG, logger="slurm_harp.server.history_feed")
    path = tmp_path / "jobs.sqlite"
    said = not_a_file(path, "FIFO")
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=0.1))
    feed.start()
    try:
        assert wait_for(lambda: feed.polls >= 5), "the feed polls on"
        failed = [r for r in caplog.records if "failed" in r.getMessage()]
        assert [r.levelno for r in failed[:5]] == [logging.ERROR] + [logging.DEBUG] * 4
        assert f"{path} is {said}" in failed[0].getMessage()
        assert all(r.exc_info is None for r in caplog.records), "no traceback"
        restored = tmp_path / "restored.sqlite"
        with JobStore(restored) as store:
            store.merge(BOB, "sacct")
        restored.replace(path)
        assert wait_for(lambda: feed.index.added == len(BOB))
    finally:
        feed.stop()
    again = [r for r in caplog.records if "reads again" in r.getMessage()]
    assert [r.levelno for r in again] == [logging.INFO]
    assert [r.levelno for r in caplog.records if r.levelno >= logging.ERROR] == [logging.ERROR]


def test_feed_reads_only_the_rows_added_whenever_their_jobs_were_submitted(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    clock = [float(NOW)]
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=60), clock=lambda: clock[0])
    request = JobRequest(user_name="dave")
    with JobStore(path) as store:
        store.merge(BOB, "sacct")
        feed.refresh(store)
        assert feed.rebuilds == 1 and feed.index.added == len(BOB)
        store.merge([finished("d1", "dave", NOW - 600, elapsed=60)], "sacct")
        feed.refresh(store)
        assert feed.rebuilds == 1 and feed.index.added == len(BOB) + 1  # incremental
        assert not feed.refresh(store)  # nothing new: nothing read
        assert feed.index.added == len(BOB) + 1
        # A job submitted 20 days ago that just ended, and one that ended before the window.
        store.merge([finished("d0", "dave", NOW - 20 * 86400, elapsed=20 * 86400 - 60)], "sacct")
        store.merge([finished("old", "dave", NOW - 40 * 86400, elapsed=60)], "sacct")
        assert feed.refresh(store)
        assert feed.rebuilds == 1 and feed.index.added == len(BOB) + 2
        expected = history_matrix(
            [*store.records(), JobRecord("x", replace(request, submit_time=NOW), "", 0)]
        )
        np.testing.assert_array_equal(feed.row(request, NOW), expected[-1])
        # 31 days on, everything has left the horizon and the keys are forgotten.
        clock[0] = NOW + 31 * 86400
        feed.refresh(store)
        assert len(feed.index) == 0


def test_a_tag_with_a_number_past_2_53_is_read_as_no_tag(tmp_path: Path) -> None:
    """The feed reads a job's own limit through core.tag.parse_tag (as_submitted), as training
    does: t0 of 400 digits raised OverflowError in the index on every rebuild."""
    path = tmp_path / "jobs.sqlite"
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=60), clock=lambda: float(NOW))
    odd = replace(BOB[0], harp_tag=f"harp:extend,t!=10,t0={'9' * 400},v=x")
    request = JobRequest(user_name="bob", job_name="relax")
    with JobStore(path) as store:
        store.merge([odd, *BOB[1:]], "sacct")
        feed.refresh(store)
        assert feed.index.added == len(BOB)
        expected = history_matrix([*BOB, JobRecord("x", replace(request, submit_time=NOW), "", 0)])
        np.testing.assert_array_equal(feed.row(request, NOW), expected[-1])


def test_rows_changed_in_place_are_taken_in_by_a_rebuild_when_due(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    clock = [float(NOW)]
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=60), clock=lambda: clock[0])
    request = JobRequest(user_name="bob", job_name="relax")

    def training_row() -> np.ndarray:
        asked = JobRecord("x", replace(request, submit_time=int(clock[0])), "", 0)
        return np.asarray(history_matrix([*store.records(), asked])[-1])

    with JobStore(path) as store:
        half = replace(BOB[-1], request=replace(BOB[-1].request, time_limit_minutes=None))
        store.merge([*BOB[:-1], half], "sacct")  # the newest job read half-filled
        feed.refresh(store)
        assert feed.rebuilds == 1
        store.merge([BOB[-1]], "sacct")  # the harvester's overlap completes it
        store.merge([finished("d1", "dave", NOW - 600, elapsed=60)], "sacct")
        feed.refresh(store)  # the new job is added; the change waits for a rebuild
        assert feed.rebuilds == 1 and feed.index.added == len(BOB) + 1
        assert not np.array_equal(feed.row(request, int(clock[0])), training_row(), equal_nan=True)
        clock[0] += REBUILD_AFTER_CHANGE_S
        assert not feed.refresh(store)  # nothing new, but the rebuild is due
        assert feed.rebuilds == 2
        np.testing.assert_array_equal(feed.row(request, int(clock[0])), training_row())
        clock[0] += REBUILD_AFTER_CHANGE_S
        feed.refresh(store)  # no change since: no rebuild
        assert feed.rebuilds == 2


def _delete(path: Path, job_id: str) -> None:
    with sqlite3.connect(path) as db:  # an operator's hand: the harvester never deletes
        db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))


def test_feed_rebuilds_when_rows_were_deleted(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=60), clock=lambda: float(NOW))
    with JobStore(path) as store:
        store.merge(BOB, "sacct")
        feed.refresh(store)
        _delete(path, "0")  # fewer rows
        feed.refresh(store)
        assert feed.rebuilds == 2 and feed.index.added == len(BOB) - 1
        # One gone and one added in between two polls: the count alone would not tell.
        _delete(path, "1")
        store.merge([finished("d1", "dave", NOW - 600, elapsed=60)], "sacct")
        feed.refresh(store)
        assert feed.rebuilds == 3 and feed.index.added == len(BOB) - 1
        # The newest row deleted, then rows added: SQLite may give a new row the deleted one's rowid.
        _delete(path, "d1")
        store.merge([finished("d2", "dave", NOW - 500, elapsed=60)], "sacct")
        feed.refresh(store)
        assert feed.rebuilds == 4 and feed.index.added == len(BOB) - 1
        _delete(path, "d2")
        store.merge([finished(f"d{i}", "dave", NOW - 500 + i, elapsed=60) for i in (3, 4)], "sacct")
        feed.refresh(store)
        assert feed.rebuilds == 5 and feed.index.added == len(BOB)
        for user in ("bob", "dave"):
            request = JobRequest(user_name=user)
            asked = JobRecord("x", replace(request, submit_time=NOW), "", 0)
            expected = history_matrix([*store.records(), asked])
            np.testing.assert_array_equal(feed.row(request, NOW), expected[-1])


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"history": {"database": "x"}}, "history.database: unknown key"),
        ({"history": {"db": ""}}, "history.db: must be a path"),
        ({"history": {"poll_seconds": 0}}, "history.poll_seconds: must be a number of seconds >= 0.1"),
        ({"history": {"window_days": 0}}, "history.window_days: must be >= 1"),
        ({"history": {"window_days": "30"}}, "history.window_days: expected int"),
        ({"policy": {"require_history": "yes"}}, "policy.require_history: expected bool"),
    ],
)
def test_history_config_errors_name_key_and_file(section: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=f"^harp.toml: {problem}"):
        parse(section, "harp.toml")


def test_history_config_defaults() -> None:
    settings = parse({})
    assert settings.history == HistorySettings(db=None, window_days=30, poll_seconds=60.0)
    assert settings.policy.require_history is True
    on = parse({"history": {"db": "/var/lib/slurm-harp/jobs.sqlite", "window_days": 45}})
    assert on.history.db == Path("/var/lib/slurm-harp/jobs.sqlite") and on.history.window_days == 45


def test_a_replaced_index_is_drained_at_the_next_poll(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=60), clock=lambda: float(NOW))
    with JobStore(path) as store:
        store.merge(BOB, "sacct")
        feed.refresh(store)  # the first rebuild replaces the empty index
        first = feed.index
        _delete(path, "0")
        feed.refresh(store)  # a row gone: rebuilt
        assert feed.rebuilds == 2 and feed.index is not first
        assert len(first) > 0  # a reader may still hold it: kept until the next poll
        feed.refresh(store)
        assert len(first) == 0 and len(feed.index) > 0
