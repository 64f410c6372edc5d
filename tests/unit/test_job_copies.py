"""A job held under two sources of the job store (saved sacct text imported over the range the
harvest read) is one job to every reader: training, `harp report`, the outcome metrics and `harp simulate
--db` (and `harp evaluate --db`: tests/integration/test_evaluate_cli.py). Only training counted it
once: the report said twice the jobs and twice harp's kills, the metrics twice the jobs and savings,
the simulator replayed twice the jobs."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.core.job import JobRecord
from slurm_harp.core.job_copies import each_job_once, first_copies
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation.outcomes import outcomes
from slurm_harp.learning.dataset import row_order
from slurm_harp.server.outcome_metrics import OutcomeMetrics
from tests.unit.test_outcome_metrics import samples
from tests.unit.test_site_report import JOBS, V

NOW = 1_790_000_000


def record(job_id: str, submit: int | None, elapsed: int = 600, tag: str | None = None) -> JobRecord:
    request = JobRequest(partition="batch", min_cpus=4, time_limit_minutes=60, submit_time=submit)
    end = None if submit is None else submit + 60 + elapsed
    return JobRecord(job_id, request, "COMPLETED", elapsed, end_time=end, alloc_cpus=4, harp_tag=tag)


def stored_under(db: Path, records: list[JobRecord], sources: tuple[str, ...]) -> Path:
    """A job store at ``db`` (its directory made) holding ``records`` under each of ``sources``."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with JobStore(db) as store:
        for source in sources:
            store.merge(records, source)
    return db


def test_a_job_is_its_id_and_submit_time_and_its_first_copy_with_a_run_time_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = [
        record("1", 100),
        record("1", 100, elapsed=5),  # a copy: left out
        record("1", 200),  # a requeued run: a job of its own
        record("2", 100),  # another id at the same time: a job of its own
        record("3", 300, elapsed=0),  # no run time here...
        record("3", 300),  # ...its copy has one: kept
        record("4", None),  # no submit time: always kept
        record("4", None),
    ]
    assert first_copies(records) == ([0, 2, 3, 5, 6, 7], 2)
    assert row_order(records) == [6, 7, 0, 3, 2, 5]  # training's rows, by the same rule
    with caplog.at_level(logging.WARNING):
        kept = each_job_once(records, "evaluated")
    assert kept == [records[i] for i in (0, 2, 3, 5, 6, 7)]
    assert caplog.messages == [
        "2 jobs are held twice (the same job id and submit time, under two sources of the job store: "
        "saved sacct text imported over the harvest's range): each is evaluated once"
    ]
    caplog.clear()
    assert each_job_once(kept, "evaluated") == kept and not caplog.messages  # no copy: nothing said


def test_the_report_counts_each_job_held_under_two_sources_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The report's jobs stored twice: the page said 14 jobs, and twice harp's kills."""
    once, once_out = stored_under(tmp_path / "once.db", JOBS, ("slurm",)), tmp_path / "once"
    assert main(["report", "--db", str(once), "--since", "2026-09-21", "--out", str(once_out)]) == 0
    stored_once = capsys.readouterr().out.replace(str(once_out), "OUT")
    assert ": 7 jobs, 5 tagged (1 untagged skipped);" in stored_once and "which kills 2 jobs" in stored_once
    db, out = stored_under(tmp_path / "jobs.db", JOBS, ("slurm", "saved-sacct")), tmp_path / "report"
    assert main(["report", "--db", str(db), "--since", "2026-09-21", "--out", str(out)]) == 0
    assert capsys.readouterr().out.replace(str(out), "OUT") == stored_once  # the figures of JOBS stored once
    assert "7 jobs are held twice (the same job id and submit time" in caplog.text
    assert "each is reported once" in caplog.text


def test_the_outcomes_count_each_job_held_under_two_sources_once(caplog: pytest.LogCaptureFixture) -> None:
    jobs = [record(str(i), NOW - 3600 * i, tag=f"harp:rewrite,t!=30,t0=60,v={V}") for i in range(1, 5)]
    once = outcomes(jobs, {V: Target.TIME}.get)
    assert not caplog.messages
    twice = outcomes([*jobs, *jobs], {V: Target.TIME}.get)
    assert twice == once and once[("time", "batch", V)].jobs == 4
    assert "4 jobs are held twice" in caplog.text and "each is counted once" in caplog.text


def test_the_outcome_metrics_count_each_job_held_under_two_sources_once_and_say_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = [record(str(i), NOW - 1800 * i, tag=f"harp:rewrite,t!=30,t0=60,v={V}") for i in range(1, 40)]
    figures = []
    for name, sources in (("once", ("slurm",)), ("twice", ("slurm", "saved-sacct"))):
        metrics = OutcomeMetrics(CollectorRegistry(), {V: Target.TIME}.get, clock=lambda: float(NOW))
        with JobStore(tmp_path / f"{name}.db") as store:
            for source in sources:
                store.merge(jobs, source)
            metrics.refresh(store, force=True)
            metrics.refresh(store, force=True)  # nothing changed: not said again
            figures.append(samples(metrics))
            if name == "twice":
                store.merge([replace(jobs[0], job_id="new")], "saved-sacct")  # a job of its own
                metrics.refresh(store, force=True)
                store.merge([replace(jobs[0], job_id="new")], "slurm")  # and now a copy
                metrics.refresh(store, force=True)
    assert figures[1] == figures[0]
    jobs_gauge = ("harp_outcome_jobs", (("partition", "batch"), ("target", "time"), ("version", V)))
    assert figures[0][jobs_gauge] == 39
    held = [m for m in caplog.messages if "held twice" in m]
    assert [m.split(" (")[0] for m in held] == ["39 jobs are held twice", "40 jobs are held twice"]
    assert held[0].endswith("each is counted in the outcome metrics once")


def test_the_simulator_replays_each_job_held_under_two_sources_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """`harp simulate --db` replayed both copies: twice the jobs queued on the same processors."""
    jobs = [record(str(i), NOW + 60 * i) for i in range(1, 31)]
    said = []
    for sources in (("slurm",), ("slurm", "saved-sacct")):
        db = stored_under(tmp_path / "-".join(sources) / "jobs.db", jobs, sources)
        assert main(["simulate", "--db", str(db), "--limits", "request"]) == 0
        said.append(capsys.readouterr().out)
    assert said[1] == said[0] and "jobs: 30 jobs on " in said[0]
    assert "30 jobs are held twice" in caplog.text and "each is replayed once" in caplog.text
