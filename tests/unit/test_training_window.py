"""Training reads of the job store only its newest jobs and those their history can see
(accounting.training_window): the same rows, features and target data as a whole read.

The store is never pruned; `harp nightly` read every row whatever `training.max_jobs` kept, and a
busy site's nightly outgrew its unit's MemoryMax (6 GB) after some months (about 2 KB a job read).
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.accounting import jobstore as jobstore_module
from slurm_harp.accounting.job_columns import record_of
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.commands import publication
from slurm_harp.core.job import JobRecord
from slurm_harp.core.key_history import DAY_S, horizon_start
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.learning.dataset import Dataset, build_dataset
from slurm_harp.learning.targets import target_data

BASE = 1_700_000_000
HOUR_S = 3600
NEWEST = 600  # 600 of 4500 jobs: 17 of 125 days, and the 30 days of history before them


def site_jobs(n: int = 4500, seed: int = 7) -> list[JobRecord]:
    """Three jobs every two hours (submit times tie) of 8 users, some running for days, a few
    stopped at their limit."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        user = rng.randrange(8)
        limit = rng.choice([60, 600, 3000, 6000])
        elapsed = min(limit * 60, int(limit * 60 * rng.uniform(0.05, 1.1)))
        submit = BASE + 2 * HOUR_S * (i // 3)
        start = submit + rng.randrange(0, 7200)
        request = JobRequest(
            user_name=f"u{user}",
            account=f"a{user % 3}",
            partition="batch",
            job_name=f"n{user}-{rng.randrange(4)}",
            time_limit_minutes=limit,
            mem_per_node_mb=4000,
            min_cpus=4,
            submit_time=submit,
        )
        timeout = elapsed == limit * 60
        out.append(
            JobRecord(
                str(i),
                request,
                "TIMEOUT" if timeout else "COMPLETED",
                elapsed_s=elapsed,
                start_time=start,
                end_time=start + elapsed,
                max_rss_mb=float(rng.randrange(100, 4000)),
                total_cpu_s=float(elapsed * rng.uniform(0.5, 4.0)),
                alloc_cpus=4,
                censored=timeout,
            )
        )
    return out


def trained(records: list[JobRecord], now: float) -> Dataset:
    """What training builds of ``records`` (commands.publication.train_held)."""
    return build_dataset(publication.trainable(records, now), max_rows=NEWEST)


def assert_same_training(part: list[JobRecord], whole: list[JobRecord], now: float) -> None:
    """The rows, features, validation split and each target's data (calibration, promotion) of
    training on ``part`` are those of training on ``whole``."""
    a, b = trained(part, now), trained(whole, now)
    assert len(a) == len(b) == NEWEST
    for field in dataclasses.fields(Dataset):
        np.testing.assert_array_equal(getattr(a, field.name), getattr(b, field.name), err_msg=field.name)
    for target in Target:
        ta = target_data(publication.trainable(part, now), a, target, NEWEST)
        tb = target_data(publication.trainable(whole, now), b, target, NEWEST)
        for field in dataclasses.fields(ta):
            x, y = getattr(ta, field.name), getattr(tb, field.name)
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, y, err_msg=f"{target.value} {field.name}")
            else:
                assert x == y


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Path, float]]:
    """A store of 4500 jobs and what makes the window's edges: jobs without a run time, an end or
    a submit time, one from a clock that ran ahead, rows edited by hand, copies under two sources,
    a job that ended as the history's horizon opened."""
    path = tmp_path / "jobs.sqlite"
    jobs = site_jobs()
    now = float(jobs[-1].request.submit_time or 0) + DAY_S
    rng = random.Random(1)
    newest = jobs[-NEWEST:]
    for i in rng.sample(range(len(jobs) - NEWEST, len(jobs)), 20):  # cancelled at once: no run
        jobs[i] = dataclasses.replace(jobs[i], state="CANCELLED", elapsed_s=0, end_time=jobs[i].start_time)
    for i in rng.sample(range(len(jobs)), 40):  # no end time known, some among the newest
        jobs[i] = dataclasses.replace(jobs[i], end_time=None)
    ahead = dataclasses.replace(
        newest[-1],
        job_id="ahead",
        request=dataclasses.replace(newest[-1].request, submit_time=int(now) + 3 * DAY_S),
        start_time=int(now) + 3 * DAY_S,
        end_time=int(now) + 3 * DAY_S + 60,
    )
    unplaced = [  # a trace's jobs: no submit time; the one that ended still counts as history
        dataclasses.replace(r, job_id=f"swf{i}", request=dataclasses.replace(r.request, submit_time=None))
        for i, r in enumerate((newest[-5], dataclasses.replace(newest[-6], end_time=None)), 1)
    ]
    with JobStore(path) as store:
        store.merge([*jobs, ahead], "sacct")
        store.merge(unplaced, "swf")
        # Saved text imported over the newest jobs: the same jobs again, first in order ("import").
        store.merge([dataclasses.replace(r, max_rss_mb=1.0) for r in newest[::7]], "import")
    with closing(sqlite3.connect(path)) as raw, raw:  # three rows every reader skips
        edited = [(r.job_id,) for r in newest[-52:-49]]
        raw.executemany("UPDATE jobs SET max_rss_mb = 'lots' WHERE job_id = ?", edited)
    # Jobs submitted before the window, of the user of its oldest job: one that ended just as the
    # horizon opened, and one whose first copy ended before it and its second (under another
    # source) within it: training takes the first copy, and must read both.
    with JobStore(path, readonly=True) as store:
        whole = list(store.records())
    oldest = int(trained(whole, now).submit_time[0])
    user = next(r.request for r in whole if r.request.submit_time == oldest and r.elapsed_s > 0)
    since = horizon_start(oldest)
    old = JobRecord("twice", dataclasses.replace(user, submit_time=since - 2 * DAY_S), "COMPLETED", 1)
    with JobStore(path) as store:
        store.merge([dataclasses.replace(old, elapsed_s=2 * DAY_S - 100, end_time=since - 100)], "a-saved")
        opened = dataclasses.replace(old, job_id="at-horizon", elapsed_s=2 * DAY_S, end_time=since)
        again = dataclasses.replace(old, elapsed_s=2 * DAY_S + HOUR_S, end_time=since + HOUR_S)
        store.merge([opened, again], "sacct")
    yield path, now


def test_training_reads_its_newest_jobs_and_their_history_and_trains_on_the_same(
    db: tuple[Path, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_harp.accounting import training_window  # not at the top: the tests below run without it

    path, now = db
    built = 0

    def counted(row: tuple[object, ...]) -> JobRecord:
        nonlocal built
        built += 1
        return record_of(row)

    with JobStore(path, readonly=True) as store:
        whole = list(store.records())
        monkeypatch.setattr(jobstore_module, "record_of", counted)  # as the reader calls it
        part = list(store.training_records(NEWEST, now))
        window = training_window.window(store._db, store._present(), NEWEST, now)
    assert built == len(part) + 3 < len(whole) // 2  # the rows edited by hand are built and skipped
    assert_same_training(part, whole, now)
    # The window starts at the oldest trained job: its counting skips no row training keeps and
    # counts none it leaves out (no run time, from the future, skipped, a second copy).
    assert window is not None and window.submitted == trained(whole, now).submit_time[0]
    assert window.ended == horizon_start(window.submitted)
    read = {r.job_id for r in part}
    assert {"twice", "at-horizon", "swf1"} <= read and "swf2" not in read


def test_a_store_of_no_more_jobs_than_training_keeps_is_read_whole(db: tuple[Path, float]) -> None:
    path, now = db
    with JobStore(path, readonly=True) as store:
        whole = list(store.records())
        assert list(store.training_records(None, now)) == whole
        assert list(store.training_records(0, now)) == whole  # build_dataset's max_rows: no cap
        assert list(store.training_records(len(whole), now)) == whole


@pytest.mark.parametrize("command", ["nightly", "train"])
def test_nightly_and_train_read_only_what_training_needs(
    db: tuple[Path, float], tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harp nightly` (training.max_jobs) and `harp train --db --max-rows` read the jobs they train
    on and their history, not every row: before, each read all the store's rows to train on 600."""
    path, clock = db
    seen: list[tuple[list[JobRecord], float | None]] = []

    def captured(
        records: list[JobRecord], targets: object, plan: object, every: bool, now: float | None = None
    ) -> int:
        seen.append((records, now))
        return 0

    monkeypatch.setattr(publication, "train_held", captured)
    monkeypatch.setattr(time, "time", lambda: clock)  # the clock the "ahead" job is ahead of
    models = tmp_path / "models"
    if command == "nightly":
        config = tmp_path / "harp.toml"
        config.write_text(
            f'[store]\npath = "{models}"\n[history]\ndb = "{path}"\n[training]\nmax_jobs = {NEWEST}\n'
        )
        assert main(["nightly", "--config", str(config), "--skip-harvest"]) == 0
    else:
        argv = ["train", "--db", str(path), "--store", str(models), "--max-rows", str(NEWEST)]
        assert main(argv) == 0
    ((records, now),) = seen
    with JobStore(path, readonly=True) as store:
        whole = list(store.records())
    read, stored = len(records), len(whole)
    assert read < stored // 2
    assert now == clock  # training leaves jobs out by the clock the store was read by
    assert_same_training(records, whole, clock)
