"""Training every target under the store's lock (commands.publication.train_held): one target's fault,
whatever it is, is that target's, logged naming it; the others are still trained."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.core.request import Target
from slurm_harp.learning import pipeline
from slurm_harp.model.store import ModelStore
from tests.unit.test_promotion import regular_users

FAST = ("--target", "all", "--quantiles", "0.5,0.9,0.99", "--compare", "none")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Jobs with a run time and a CPU use: time and cpus are trained, memory has no data."""
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.merge([dataclasses.replace(r, total_cpu_s=4.0 * r.elapsed_s) for r in regular_users(700)], "x")
    return path


def test_a_version_named_at_the_last_moment_fails_its_target_only(
    db: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory named 99991231T235959.999999Z (a bad restore) left no name for the next time
    version: the run ended with an OverflowError traceback, and cpus, after time, was not trained."""
    store = ModelStore(tmp_path / "models")
    (store.target_dir(Target.TIME) / "99991231T235959.999999Z").mkdir(parents=True)
    assert main(["train", "--db", str(db), "--store", str(store.root), *FAST]) == 1
    assert (
        f"time: trained but not published in {store.root}: {store.target_dir(Target.TIME)}: no version name "
        "sorts after 99991231T235959.999999Z; the serving version stays"
    ) in caplog.text
    assert store.versions(Target.TIME) == [] and len(store.versions(Target.CPUS)) == 1
    assert "training failed for some targets: time: not published" in caplog.text


def test_any_error_publishing_a_target_is_that_target_s_fault(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An error no handler foresaw (a bug, a library's own) ended the run with a traceback, the
    targets after it untrained. It is logged with its traceback and the target; the run goes on and
    exits 1. An interrupt still ends the run."""
    train_and_publish = pipeline.train_and_publish

    def failing(*args: object, **kwargs: object) -> pipeline.Outcome:
        if args[2] is Target.TIME:
            raise ValueError("time data '20261399T000000.000000Z' does not match format")
        return train_and_publish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "train_and_publish", failing)
    store = ModelStore(tmp_path / "models")
    assert main(["train", "--db", str(db), "--store", str(store.root), *FAST]) == 1
    failed = next(r for r in caplog.records if r.getMessage().startswith("time: failed"))
    assert failed.getMessage() == (
        "time: failed, not published (ValueError: time data '20261399T000000.000000Z' does not match "
        "format); the serving version stays"
    )
    assert failed.exc_info is not None  # its traceback, for a bug report
    assert store.versions(Target.TIME) == [] and len(store.versions(Target.CPUS)) == 1
    assert "training failed for some targets: time: failed (ValueError)" in caplog.text

    def interrupted(*args: object, **kwargs: object) -> pipeline.Outcome:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "train_and_publish", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(["train", "--db", str(db), "--store", str(store.root), *FAST])


def test_a_target_published_but_not_finished_is_not_said_unpublished(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A prune that failed after the version was published and promoted ended the run with
    `training failed: no target was published: time: published, not finished`."""

    def failing(*args: object) -> list[str]:
        raise PermissionError(13, "Permission denied", str(tmp_path / "models" / "time"))

    monkeypatch.setattr(pipeline, "prune", failing)
    store = ModelStore(tmp_path / "models")
    args = ["--target", "time", "--quantiles", "0.5,0.9,0.99", "--compare", "none"]
    assert main(["train", "--db", str(db), "--store", str(store.root), *args]) == 1
    assert store.current_version(Target.TIME) in store.versions(Target.TIME)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors[-1] == "training failed for every target: time: published, not finished"
