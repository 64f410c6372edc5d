"""The outcome gauges, kept per hour of end time, equal a reading of the whole window after any
change to the store: rows added late, changed in place or deleted, time moving, model versions
coming and going."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.accounting.jobstore import HOUR_S, JobStore
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.server.outcome_metrics import OutcomeMetrics

NOW = 1_790_000_000
WINDOW_S = 7 * 86400
V1, V2 = "20261101T000000.000000Z", "20261102T000000.000000Z"


def job(rng: random.Random, job_id: str, now: int) -> JobRecord:
    end = now - rng.randrange(WINDOW_S + 2 * 86400)
    minutes = rng.choice((30, 60, 90, 600))
    tag = rng.choice(
        (
            None,
            f"harp:shadow,t={minutes}/q0.9,v={V1}",
            f"harp:rewrite,t!={minutes},t0=600,v={V2}",
            f"harp:shadow,t={minutes},m=2000,v={V1}+{V2}",
        )
    )
    elapsed = rng.randrange(60, 700 * 60)
    request = JobRequest(partition=rng.choice(("batch", "gpu")), min_cpus=4, time_limit_minutes=600)
    state = "TIMEOUT" if elapsed >= minutes * 60 and rng.random() < 0.3 else "COMPLETED"
    return JobRecord(
        job_id, request, state, elapsed, end_time=end, alloc_cpus=4, max_rss_mb=1000.0, harp_tag=tag
    )


def samples(metrics: OutcomeMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in metrics.collect():
        for sample in family.samples:
            if sample.name != "harp_outcome_computed_timestamp_seconds":
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def whole_window(store: JobStore, owner: dict[str, Target], now: int) -> OutcomeMetrics:
    """A daemon just started: every hour read."""
    fresh = OutcomeMetrics(CollectorRegistry(), owner.get, window_s=WINDOW_S, clock=lambda: float(now))
    fresh.refresh(store, force=True)
    return fresh


@pytest.mark.parametrize("seed", range(4))
def test_hourly_figures_equal_a_reading_of_the_whole_window(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = [NOW]
    owner = {V1: Target.TIME, V2: Target.TIME}
    metrics = OutcomeMetrics(CollectorRegistry(), lambda v: owner.get(v), window_s=WINDOW_S,
                             clock=lambda: float(clock[0]))  # fmt: skip
    path = tmp_path / "jobs.sqlite"
    ids = 0
    with JobStore(path) as store:
        for _ in range(25):
            step = rng.randrange(5)
            if step == 0:  # the harvester brings jobs, some of them ended long ago
                store.merge([job(rng, str(ids + i), clock[0]) for i in range(rng.randrange(1, 40))], "sacct")
                ids += 40
            elif step == 1 and ids:  # rows completed or changed in place
                store.merge([job(rng, str(rng.randrange(ids)), clock[0]) for _ in range(5)], "sacct")
            elif step == 2 and ids:  # an operator deletes rows
                with sqlite3.connect(path) as db:
                    db.execute("DELETE FROM jobs WHERE job_id = ?", (str(rng.randrange(ids)),))
            elif step == 3:
                clock[0] += rng.randrange(4 * HOUR_S)
            else:  # a version leaves the model store, or comes back
                owner = {V1: Target.TIME} if V2 in owner else {V1: Target.TIME, V2: Target.MEMORY}
            metrics.refresh(store, force=True)
            expected = samples(whole_window(store, owner, clock[0]))
            got = samples(metrics)
            assert got.keys() == expected.keys()
            for name, value in expected.items():
                assert got[name] == pytest.approx(value, rel=1e-9), name


def test_a_refresh_reads_only_the_hours_that_changed(tmp_path: Path) -> None:
    rng = random.Random(7)
    metrics = OutcomeMetrics(CollectorRegistry(), {V1: Target.TIME}.get, window_s=WINDOW_S,
                             clock=lambda: float(NOW))  # fmt: skip
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge([job(rng, str(i), NOW) for i in range(2000)], "sacct")
        metrics.refresh(store, force=True)
        everything = metrics.hours_read
        assert everything > 100  # a week of hours
        late = replace(job(rng, "late", NOW), end_time=NOW - 50 * HOUR_S, harp_tag=f"harp:shadow,t=60,v={V1}")
        store.merge([late], "sacct")
        metrics.refresh(store, force=True)
        assert metrics.hours_read - everything == 1  # its hour
        metrics.refresh(store, force=True)
        assert metrics.hours_read - everything == 1  # nothing changed: nothing read


def test_with_no_new_jobs_the_window_moves_on_every_5_minutes(tmp_path: Path) -> None:
    """docs/install.md: the gauges are recomputed every 5 minutes, not only when the harvester adds
    jobs: a job that leaves the window leaves them by the next recomputation."""
    now = [float(NOW)]
    metrics = OutcomeMetrics(CollectorRegistry(), {V1: Target.TIME}.get, window_s=WINDOW_S,
                             clock=lambda: now[0])  # fmt: skip
    request = JobRequest(partition="batch", min_cpus=4, time_limit_minutes=600)
    leaving = JobRecord("1", request, "COMPLETED", 1800, end_time=NOW - WINDOW_S + 60, alloc_cpus=4,
                        harp_tag=f"harp:shadow,t=60,v={V1}")  # fmt: skip
    jobs = ("harp_outcome_jobs", (("partition", "batch"), ("target", "time"), ("version", V1)))
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge([leaving], "sacct")
        assert metrics.refresh(store) and samples(metrics)[jobs] == 1
        now[0] += 299  # the job left the window; the figures wait for the period
        assert not metrics.refresh(store) and samples(metrics)[jobs] == 1
        now[0] += 1
        assert metrics.refresh(store) and jobs not in samples(metrics)
