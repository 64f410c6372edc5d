"""`harp nightly`: harvest, train, promote from the config; sacct faked at the subprocess boundary."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from slurm_harp.accounting import sacct_runner as sacct_module
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.commands import harvest as harvest_command
from slurm_harp.commands import nightly as nightly_command
from slurm_harp.commands.publication import STORE_BUSY
from slurm_harp.core.request import Target
from slurm_harp.model import store as store_module
from slurm_harp.model.store import LOCK_FILE, ModelStore
from tests.conftest import write_schema_version
from tests.unit.test_harvest import TEXT, FakeSacct
from tests.unit.test_harvest_cursor import damage
from tests.unit.test_promotion import regular_users


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A config whose job store already holds a history of regular users."""
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        store.merge(regular_users(700), "import")
    config = tmp_path / "harp.toml"
    config.write_text(
        f'[store]\npath = "{tmp_path / "models"}"\n[history]\ndb = "{db}"\n[training]\nkeep = 2\n'
    )
    return config


def test_nightly_harvests_trains_and_promotes(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sacct = FakeSacct(TEXT)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    assert main(["nightly", "--config", str(site)]) == 0
    assert sacct.calls and all("--noconvert" in call for call in sacct.calls)
    with JobStore(tmp_path / "jobs.sqlite", readonly=True) as store:
        assert store.count("sacct") > 0 and store.cursor("sacct") is not None
    models = ModelStore(tmp_path / "models")
    first = models.current_version(Target.TIME)
    assert first is not None
    note = models.verdict(Target.TIME, first) or {}
    assert note["promote"] and note["kill_budget"] == 0.01
    out = capsys.readouterr().out
    assert "harvest sacct:" in out and "promoted: no champion" in out

    # The next night: a new version, judged against the serving one; --keep 2 from the config.
    for _ in range(2):
        assert main(["nightly", "--config", str(site)]) == 0
    versions = models.versions(Target.TIME)
    assert len(versions) == 2 and first not in versions
    note = models.verdict(Target.TIME, versions[-1]) or {}
    # Nothing new was harvested since the serving version trained: no fair comparison, and the
    # new version, within its kill budget, is served.
    assert note["promote"] and "jobs of the window are new to the champion" in note["reason"]
    assert models.current_version(Target.TIME) == versions[-1]


def test_nightly_judges_promotion_by_the_limits_its_policy_sets(site: Path, tmp_path: Path) -> None:
    """With `[policy] limits = "quantile"` the daemon serves quantile models, and promotion judged
    each version by its calibrated rule all the same (audit: promo_quantile.py, judged 0.00 % newly
    killed where the daemon killed 7.38 %). The nightly now hands promotion the config's policy:
    the versions are judged by the quantile model it serves (tests/unit/test_promotion_policy.py
    shows the figures are the daemon's)."""
    assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0  # the default policy
    models = ModelStore(tmp_path / "models")
    assert models.current_version(Target.TIME) is not None
    site.write_text(site.read_text() + '[policy]\nlimits = "quantile"\nquantile = 0.5\n')
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge(regular_users(1000)[700:], "import")  # jobs new to the serving version
    assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0
    note = models.verdict(Target.TIME, models.versions(Target.TIME)[-1]) or {}
    assert "the 200 jobs new to the champion, by the quantile model nearest q0.5" in note["reason"], note
    # The median model the policy serves kills far past the 1 % budget, the rule's within it: the
    # serving version too is judged by what the daemon serves.
    assert note["champion"]["killed_pct"] > 5 and note["challenger"]["killed_pct"] > 5, note


def test_a_second_nightly_meets_the_lock_before_it_harvests(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A timer's nightly and an admin's at once: the second exits 75 before it calls sacct or opens
    the job store (it harvested, then loaded every job, and only then met the lock). The first
    holds the store's lock from before its harvest to the end."""
    db = tmp_path / "jobs.sqlite"
    second: list[int] = []
    first = FakeSacct(TEXT)

    def sacct_while_another_starts(argv: Sequence[str]) -> str:
        if not first.calls:  # the second run starts while the first is in its harvest
            first.calls.append([])  # (and its own sacct calls, if any, go to the first's)
            second.extend((main(["nightly", "--config", str(site)]), len(first.calls) - 1))
        return first(argv)

    monkeypatch.setattr(sacct_module, "run_sacct", sacct_while_another_starts)
    assert main(["nightly", "--config", str(site)]) == 0
    assert second == [STORE_BUSY, 0]  # the second called no sacct of its own
    busy = f"{tmp_path / 'models' / LOCK_FILE} is held by another harp train or nightly (pid {os.getpid()})"
    assert f"{busy}: not harvesting or training; the next run will (exit 75)" in caplog.text
    assert len(ModelStore(tmp_path / "models").versions(Target.TIME)) == 1

    # Held by another process: nothing is read or written, the job store included.
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(db.name)}
    monkeypatch.setattr(sacct_module, "run_sacct", late := FakeSacct(TEXT))
    monkeypatch.setattr(nightly_command, "JobStore", None)  # any use of it would fail the run
    monkeypatch.setattr(harvest_command, "JobStore", None)
    with ModelStore(tmp_path / "models").writer():
        assert main(["nightly", "--config", str(site), "--skip-harvest"]) == STORE_BUSY
        assert main(["nightly", "--config", str(site)]) == STORE_BUSY
    assert late.calls == []
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(db.name)} == before
    assert len(ModelStore(tmp_path / "models").versions(Target.TIME)) == 1


def test_a_failed_harvest_stops_the_chain(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(RuntimeError("sacct exited 1: slurmdbd down")))
    assert main(["nightly", "--config", str(site)]) == 1
    assert "slurmdbd down" in caplog.text and "not retraining tonight" in caplog.text
    assert ModelStore(tmp_path / "models").versions(Target.TIME) == []
    # --skip-harvest trains on the store as it is; [training] refit = false publishes the validated
    # models; trees, learning_rate and ladder_rows reach the boosters, calibrate_by the rule (and
    # a 5 % kill budget, which its 140 validation jobs can show met: calibration.jobs_needed).
    settings = (
        "keep = 2\nrefit = false\ntrees = 12\nlearning_rate = 0.3\nladder_rows = 400\n"
        'calibrate_by = "partition"\nkill_budget = 0.05'
    )
    site.write_text(site.read_text().replace("keep = 2", settings))
    with caplog.at_level(logging.INFO, logger="slurm_harp"):  # `harp demo` may have quieted it
        assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0
    current = ModelStore(tmp_path / "models").current_dir(Target.TIME)
    assert current is not None
    card = json.loads((current / "card.json").read_text())
    assert card["training"]["refit"] == "off"
    assert card["params"]["n_estimators"] == 12 and card["params"]["learning_rate"] == 0.3
    assert card["training"]["ladder_rows"] == 400
    assert card["training"]["calibrate_by"] == "partition"
    assert card["calibration"]["by"] == "partition" and card["calibration"]["rungs"]
    assert "risks of their own for 0 partitions" in caplog.text  # the site's jobs name none


def test_a_store_that_cannot_be_written_fails_that_target_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk fills while tonight's time version is written: that target is logged and its
    serving version stays; the other targets are still trained and published."""
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as jobs:
        jobs.merge([dataclasses.replace(r, total_cpu_s=4.0 * r.elapsed_s) for r in regular_users(700)], "x")
    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "models"}"\n[history]\ndb = "{db}"\n')
    assert main(["nightly", "--config", str(config), "--skip-harvest"]) == 0
    models = ModelStore(tmp_path / "models")
    serving = {t: models.current_version(t) for t in (Target.TIME, Target.CPUS)}
    write = store_module._write_synced

    def full_for_time(path: Path, data: bytes) -> None:
        if path.parent.parent.name == Target.TIME.value:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        write(path, data)

    monkeypatch.setattr(store_module, "_write_synced", full_for_time)
    assert main(["nightly", "--config", str(config), "--skip-harvest"]) == 1
    assert f"time: trained but not published in {tmp_path / 'models'}: [Errno 28]" in caplog.text
    assert models.current_version(Target.TIME) == serving[Target.TIME]
    assert models.versions(Target.TIME) == [serving[Target.TIME]]
    assert [p.name for p in models.target_dir(Target.TIME).iterdir() if p.name.startswith(".")] == []
    assert len(models.versions(Target.CPUS)) == 2  # the next target was trained all the same


def test_a_published_version_that_does_not_load_is_named_not_blamed_on_the_data(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk garbles tonight's time model as it is written: published, it does not load. It was
    logged as the warning `time: not trained: ...` and the run ended `training failed: no target had
    enough data`, sending the operator to the harvester. It is still never served."""
    assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0
    models = ModelStore(tmp_path / "models")
    serving = models.current_version(Target.TIME)
    write = store_module._write_synced

    def garbled(path: Path, data: bytes) -> None:
        write(path, data[:-7] + b"garbage" if path.suffix == ".onnx" else data)

    monkeypatch.setattr(store_module, "_write_synced", garbled)
    caplog.clear()
    assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 1
    (broken,) = [v for v in models.versions(Target.TIME) if v != serving]
    assert models.current_version(Target.TIME) == serving and models.refused(Target.TIME, broken)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[0].startswith(f"time: published {broken} but it does not load: ")
    assert "sha256 mismatch" in errors[0] and errors[0].endswith("; never served, the serving version stays")
    assert errors[-1] == (
        f"training failed for every target: time: published {broken}, which does not load; "
        "memory: not enough data; cpus: not enough data"
    )
    assert "no target had enough data" not in caplog.text and "no target was published" not in caplog.text


def test_a_version_it_cannot_read_neither_fails_the_night_nor_is_pruned(
    site: Path, tmp_path: Path, lock_out: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    """The serving version copied in by root with umask 077: every night promoted its challenger,
    then failed to prune (`training failed: no target was published: time: published, not
    finished`, exit 1) and versions piled up."""
    for _ in range(2):
        assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0
    models = ModelStore(tmp_path / "models")
    older, locked = models.versions(Target.TIME)
    lock_out(models.target_dir(Target.TIME) / locked)
    caplog.clear()
    assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0
    newest = models.versions(Target.TIME)[-1]
    assert models.versions(Target.TIME) == [older, locked, newest]
    assert models.current_version(Target.TIME) == newest  # judged alone: the champion does not load
    assert f"time: version {locked} cannot be read (" in caplog.text and "training failed" not in caplog.text


def test_the_summary_says_no_target_had_enough_data_only_when_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as jobs:
        jobs.merge(regular_users(700)[:50], "import")
    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "models"}"\n[history]\ndb = "{db}"\n')
    assert main(["nightly", "--config", str(config), "--skip-harvest"]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["training failed: no target had enough data"]


@pytest.mark.parametrize("command", ["nightly", "train"])
def test_a_stored_time_out_of_range_is_left_out_of_training_not_fatal(
    site: Path, tmp_path: Path, command: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A trace imported before the readers checked its times (an SWF UnixStartTime in
    milliseconds: the year 27969) stopped every nightly after with a ValueError traceback; a job
    stamped by a clock that ran ahead would stay the newest submission, which promotion judges by.
    `harp train --db` reads the same store and leaves them out alike."""
    (job,) = regular_users(1)
    future = dataclasses.replace(
        job,
        job_id="999999",
        request=dataclasses.replace(job.request, submit_time=820454400000),
        start_time=820454400010,
        end_time=820454400610,
    )
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge([future], "future")
    with caplog.at_level(logging.WARNING):
        if command == "nightly":
            assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 0
        else:
            db, models_dir = tmp_path / "jobs.sqlite", tmp_path / "models"
            assert main(["train", "--db", str(db), "--store", str(models_dir), "--target", "time"]) == 0
    assert (
        "1 jobs of the job store left out of training, a time before 1970 or more than a day" in caplog.text
    )
    assert "job 999999: submit time 820454400000 is in the future" in caplog.text
    models = ModelStore(tmp_path / "models")
    version = models.current_version(Target.TIME)
    assert version is not None
    card = json.loads((tmp_path / "models" / "time" / version / "card.json").read_text())
    assert card["training"]["last_submit_epoch"] < 2**31  # not the job from the future


@pytest.mark.parametrize("stored", ["3", "garbled"])
def test_a_job_store_of_a_newer_or_garbled_schema_is_named_not_a_traceback(
    site: Path, tmp_path: Path, stored: str, caplog: pytest.LogCaptureFixture
) -> None:
    """--skip-harvest opens the job store to read it: a schema_version newer than this harp (or not
    a number) ended the nightly with a RuntimeError (or int()'s ValueError) traceback."""
    db = tmp_path / "jobs.sqlite"
    write_schema_version(db, stored)
    assert main(["nightly", "--config", str(site), "--skip-harvest"]) == 1
    assert f"not training: {db}: schema_version {stored!r} is " in caplog.text
    assert ModelStore(tmp_path / "models").versions(Target.TIME) == []


def test_a_damaged_job_store_is_named_not_a_traceback(
    site: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "jobs.sqlite").write_bytes(b"this is not sqlite at all" * 100)
    for extra in (["--skip-harvest"], []):
        caplog.clear()
        assert main(["nightly", "--config", str(site), *extra]) == 1
        assert f"the job store {tmp_path / 'jobs.sqlite'} is damaged or no SQLite database" in caplog.text


def test_a_damaged_harvest_cursor_is_named_with_the_harvest_that_reads_past_it(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every night said `harvest stopped at sacct: invalid literal for int()` and `the next run
    resumes`, and skipped training, for good: a nightly has no --start."""
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        store.set_cursor("sacct", 1_700_000_000)
    damage(db, "garbled")
    sacct = FakeSacct(TEXT)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    assert main(["nightly", "--config", str(site)]) == 1
    assert sacct.calls == [] and "at sacct" not in caplog.text
    assert f"harvest not started: the job store {db}: the harvest cursor of source 'sacct' is 'garbled'" in (
        caplog.text
    )
    assert f"(slurm-harp by default), `harp harvest --db {db} --source-name sacct --start " in caplog.text
    assert "the harvest failed: not retraining tonight" in caplog.text


def test_config_problems_are_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "harp.toml"
    config.write_text('[store]\npath = "/tmp/x"\n')
    assert main(["nightly", "--config", str(config)]) == 2
    assert "history.db is not set" in caplog.text
    config.write_text("[training]\nkill_budget = 2\n")
    assert main(["nightly", "--config", str(config)]) == 2
    assert "training.kill_budget" in caplog.text
