"""`harp explain`: the job's tag, the model version it names, the rule's candidates, the policy now.
sacct is faked at the subprocess boundary; the model is a real one from the store."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_harp.accounting import sacct_runner
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.accounting.sacct_runner import SACCT_FIELDS
from slurm_harp.cli import main
from slurm_harp.commands.explain import explain
from slurm_harp.config import parse
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore
from tests.conftest import delimited

FIELDS = {
    "JobIDRaw": "4242", "JobID": "4242", "JobName": "relax", "User": "alice", "UID": "1000",
    "Account": "phys", "Partition": "batch", "QOS": "normal", "State": "RUNNING", "ExitCode": "0:0",
    "AdminComment": "", "ElapsedRaw": "600", "TimelimitRaw": "42", "ReqMem": "4000M", "MaxRSS": "",
    "ReqCPUS": "8", "AllocCPUS": "8", "NNodes": "1", "NTasks": "", "ReqNodes": "1", "TotalCPU": "00:00:00",
    "ReqTRES": "cpu=8,mem=4000M,node=1", "Submit": "2026-11-20T10:00:00", "Start": "2026-11-20T10:01:00",
    "End": "Unknown", "WorkDir": "/home/alice", "Flags": "SchedMain",
}  # fmt: skip


def sacct_with(tag: str, **fields: str) -> tuple[list[list[str]], object]:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> str:
        calls.append(list(argv))
        row = {**FIELDS, **fields, "AdminComment": tag}
        return delimited(
            "\n".join(["|".join(SACCT_FIELDS), "|".join(row[f] for f in SACCT_FIELDS), ""]), argv
        )

    return calls, runner


def test_a_lowered_running_job_is_explained_from_its_tag_and_model(trained_store: Path) -> None:
    version = ModelStore(trained_store).current_version(Target.TIME)
    settings = parse({"store": {"path": str(trained_store)}, "policy": {"limits": "quantile"}})
    calls, runner = sacct_with(f"backup:x harp:extend,t!=42,t0=600,v={version}")
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert calls[0][:2] == ["sacct", "-a"] and calls[0][calls[0].index("-j") + 1] == "4242"
    assert "job 4242: user alice, partition batch, account phys; RUNNING" in text
    assert "ran 10.0 min, limit now 42.0 min" in text
    assert "time: lowered to 42 min from the user's 600 min; harp guard extends it up to 600 min" in text
    assert f"time model {version}: trained" in text and "serving now" in text
    assert "q0.9 prediction for this job:" in text
    assert "(no [history] db configured" in text
    assert "policy now: mode shadow for partition batch, account phys; limits quantile" in text


def test_sacct_is_asked_for_the_one_job_with_a_delimiter_of_each_run(trained_store: Path) -> None:
    """As a harvest runs it (sacct_runner), but for the newest record of one id: a delimiter no user
    knew when naming a job, so no other job's free text passes for this job's row."""
    settings = parse({"store": {"path": str(trained_store)}})
    calls, runner = sacct_with("")
    for _ in range(2):
        explain("4242", settings, runner)  # type: ignore[arg-type]
    delimiters = [argv[4].removeprefix("--delimiter=") for argv in calls]
    for argv, delimiter in zip(calls, delimiters, strict=True):
        assert argv[:4] == ["sacct", "-a", "-P", "--noconvert"] and argv[4] == f"--delimiter={delimiter}"
        assert argv[5:] == ["-j", "4242", "-o", ",".join(SACCT_FIELDS)]
        assert delimiter.startswith("\x1f") and delimiter.endswith("\x1f") and len(delimiter) == 18
    assert delimiters[0] != delimiters[1]


def test_the_calibrated_rule_shows_every_rung(tmp_path: Path) -> None:
    from tests.conftest import REPO

    store = REPO / "models" / "reference"  # its time model carries a calibrated rule
    version = ModelStore(store).current_version(Target.TIME)
    settings = parse({"store": {"path": str(store)}, "policy": {"mode": "rewrite"}})
    _, runner = sacct_with(f"harp:rewrite,t!=42,t0=600,v={version}")
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert "calibrated rule (penalty" in text and "rung  model" in text
    assert ("the rule picks" in text) or ("the rule keeps the request" in text)
    assert "policy now: mode rewrite" in text


def test_what_a_user_chose_reaches_the_admins_terminal_escaped(trained_store: Path) -> None:
    # An account Slurm took as given (no AccountingStorageEnforce=associations): an OSC sequence
    # that sets the terminal's title, a CSI that clears the screen, a bidi override, a newline.
    settings = parse({"store": {"path": str(trained_store)}, "policy": {"limits": "quantile"}})
    account = "phys\x1b]0;owned\x07\x9b2J\u202etxt\nfake line"
    _, runner = sacct_with("", Account=account)
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert all(c.isprintable() for line in text.splitlines() for c in line)
    # A-Z lowered, as accounting keeps an account (core.text.LOWERED_FIELDS): "2J" reads "2j".
    assert "account phys\\x1b]0;owned\\x07\\x9b2j\\u202etxt\\nfake line;" in text
    assert len(text.splitlines()) == 3  # the job's line, "no harp tag", the policy now


def test_no_tag_no_job_and_a_bad_id_are_said_plainly(trained_store: Path) -> None:
    settings = parse({"store": {"path": str(trained_store)}})
    _, runner = sacct_with("")
    assert "no harp tag: harp did not see this job" in explain("4242", settings, runner)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="job 77: not in accounting"):
        explain("77", settings, runner)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a job id"):
        explain("42; rm -rf /", settings, runner)  # type: ignore[arg-type]
    _, runner = sacct_with("harp:shadow,t=30,v=20000101T000000.000000Z")
    assert "is not in" in explain("4242", settings, runner)  # type: ignore[arg-type]


def test_a_target_is_explained_by_a_version_of_its_own(store_copy: Path) -> None:
    """A tag's version is looked for among its target's versions (ModelStore.owner): a name that
    reaches into another target's directory is not taken for one, nor loaded as that target's model."""
    version = ModelStore(store_copy).current_version(Target.TIME)
    (store_copy / "memory").mkdir()
    settings = parse({"store": {"path": str(store_copy)}, "policy": {"limits": "quantile"}})
    _, runner = sacct_with(f"harp:shadow,m=2000,v=../time/{version}")
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert f"memory model: ../time/{version} is not in {store_copy}" in text
    assert f"memory model {version}" not in text


def test_a_version_linked_out_of_the_store_is_not_loaded(store_copy: Path, tmp_path: Path) -> None:
    """A link is no version for explain as for the daemon, promotion and `harp rollback`."""
    version = ModelStore(store_copy).current_version(Target.TIME)
    assert version is not None
    version_dir = store_copy / "time" / version
    elsewhere = tmp_path / "elsewhere"
    version_dir.rename(elsewhere)
    version_dir.symlink_to(elsewhere)
    settings = parse({"store": {"path": str(store_copy)}})
    _, runner = sacct_with(f"harp:shadow,t=30,v={version}")
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert f"time model: {version} is not in {store_copy}" in text
    assert "trained" not in text


def test_a_model_failing_as_no_check_foresaw_is_said_not_a_traceback(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """explain loaded with QuantileModel.load, whose unforeseen errors (onnxruntime's own) ended the
    command in a traceback; it loads as the daemon does (load_version: any failure a ModelError)."""
    version = ModelStore(store_copy).current_version(Target.TIME)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("onnxruntime said no")

    monkeypatch.setattr(QuantileModel, "load", broken)
    settings = parse({"store": {"path": str(store_copy)}})
    _, runner = sacct_with(f"harp:shadow,t=30,v={version}")
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert f"time model {version}: does not load now: " in text
    assert "RuntimeError: onnxruntime said no" in text


def test_a_version_that_cannot_be_entered_is_said_not_a_traceback(
    store_copy: Path, lock_out: Callable[[Path], None]
) -> None:
    """A version directory copied in by root with umask 077 made the store's listing raise."""
    store = ModelStore(store_copy)
    version = store.current_version(Target.TIME)
    assert version is not None
    lock_out(store.target_dir(Target.TIME) / version)
    _, runner = sacct_with(f"harp:shadow,t=30,v={version}")
    text = explain("4242", parse({"store": {"path": str(store_copy)}}), runner)  # type: ignore[arg-type]
    assert f"time model {version}: does not load now: " in text and "Permission denied" in text


def test_a_current_that_does_not_read_still_explains_the_job_from_its_own_version(store_copy: Path) -> None:
    """Whether the job's version serves now was asked of CURRENT in a way that raised: a garbled
    CURRENT (or one past what harp writes) ended every explanation at `harp explain: ...`."""
    store = ModelStore(store_copy)
    version = store.current_version(Target.TIME)
    assert version is not None
    _, runner = sacct_with(f"harp:shadow,t=30,v={version}")
    for garbled in (b"garbage\n", b" " * 300 + version.encode()):
        (store.target_dir(Target.TIME) / "CURRENT").write_bytes(garbled)
        text = explain("4242", parse({"store": {"path": str(store_copy)}}), runner)  # type: ignore[arg-type]
        assert f"time model {version}: trained " in text and "no longer serving" in text, text


def test_an_older_job_with_the_same_id_is_in_the_users_history(trained_store: Path, tmp_path: Path) -> None:
    """A job id given again (MaxJobId wrapped, slurmctld lost its state) names two jobs: the older
    one, ended the day before this one was submitted, is history, as the daemon's feed had it."""
    submit = int(datetime.fromisoformat(FIELDS["Submit"]).replace(tzinfo=UTC).timestamp())
    day_before = submit - 86400
    older = JobRecord(
        "4242", JobRequest(user_name="alice", job_name="relax", submit_time=day_before), "COMPLETED", 600,
        start_time=day_before, end_time=day_before + 600,
    )  # fmt: skip
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        store.upsert([older], "sacct")
    version = ModelStore(trained_store).current_version(Target.TIME)
    settings = parse(
        {"store": {"path": str(trained_store)}, "history": {"db": str(db)}, "policy": {"limits": "quantile"}}
    )
    _, runner = sacct_with(f"harp:shadow,t=30,v={version}")
    text = explain("4242", settings, runner)  # type: ignore[arg-type]
    assert "q0.9 prediction for this job:" in text
    assert "no job ended in the history window" not in text


def test_a_damaged_history_db_or_a_sacct_that_times_out_is_one_line(
    trained_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both ended `harp explain` in a traceback (sqlite3.DatabaseError, subprocess.TimeoutExpired):
    only OSError, RuntimeError and ValueError were caught."""
    db = tmp_path / "jobs.sqlite"
    db.write_bytes(b"this is not sqlite at all" * 200)
    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{trained_store}"\n[history]\ndb = "{db}"\n')
    version = ModelStore(trained_store).current_version(Target.TIME)
    _, runner = sacct_with(f"harp:shadow,t=30,v={version}")
    monkeypatch.setattr(sacct_runner, "run_sacct", runner)
    assert main(["explain", "4242", "--config", str(config)]) == 1
    assert capsys.readouterr().out.startswith(
        f"harp explain: the job store {db} is damaged or no SQLite database (file is not a database)"
    )

    def hung(argv: Sequence[str]) -> str:
        raise subprocess.TimeoutExpired(list(argv), 600)

    monkeypatch.setattr(sacct_runner, "run_sacct", hung)
    assert main(["explain", "4242", "--config", str(config)]) == 1
    assert capsys.readouterr().out == "harp explain: sacct did not answer within 600 s\n"
