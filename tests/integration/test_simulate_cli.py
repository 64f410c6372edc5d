"""`harp simulate` as a process on a slice of the bundled KTH-SP2 trace."""

from __future__ import annotations

import gzip
import json
import sqlite3
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE

TRACE = "KTH-SP2-1996-2.1-cln"


def _harp(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "slurm_harp.cli", "--log-level", "WARNING", "simulate", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_simulate_writes_the_table_json_and_plots(tmp_path: Path) -> None:
    # Ours from a file of predictions: half the request for the first 1,000 jobs, none for the rest.
    from slurm_harp.simulation import load_workload

    jobs = load_workload(BUNDLED_TRACE).head(3000)
    predictions = tmp_path / "predicted.csv"
    rows = [f"{job_id},{jobs.request[i] / 2}" for i, job_id in enumerate(jobs.ids[:1000])]
    predictions.write_text("job_id,seconds\n" + "\n".join(rows) + "\n")
    out = tmp_path / "report"
    proc = _harp(
        str(BUNDLED_TRACE),
        "--max-jobs",
        "3000",
        "--scheduler",
        "slurm",
        "--limits",
        "request,easy++,ours-rewrite,ours-extend",
        "--predictions",
        str(predictions),
        "--progress",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{TRACE}: 3000 jobs on 100 processors, scheduler slurm" in proc.stdout
    assert "ours: policy from harp's defaults" in proc.stdout
    # Whole minutes, the 10-minute floor and min_gain keep the request of the shortest jobs.
    lowered = int(
        proc.stdout.split("ours-extend: predictions for 1000 of 3000 jobs; the policy lowers ")[1].split()[0]
    )
    assert 200 < lowered < 1000
    assert "| slurm | ours-extend |" in proc.stdout
    assert "3000/3000 jobs" in proc.stderr
    doc = json.loads((out / f"{TRACE}-slurm.json").read_text())
    runs = {r["limits"]: r for r in doc["runs"]}
    assert list(runs) == ["request", "easy++", "ours-rewrite", "ours-extend"]
    assert runs["request"]["jobs"] == 3000 - 30
    # Halving requests kills the jobs that ran longer than half; extending never kills early.
    assert runs["ours-rewrite"]["killed_early_jobs"] > 0
    assert runs["ours-extend"]["killed_early_jobs"] == 0
    assert runs["ours-extend"]["extensions"] > 0
    assert (out / f"{TRACE}-slurm.md").read_text().startswith(f"## {TRACE}: 3000 jobs")
    for png in ("waits", "bsld"):
        assert (out / f"{TRACE}-slurm-{png}.png").stat().st_size > 5000


def test_ours_without_predictions_fits_along_the_trace() -> None:
    """No look-ahead: each period is served by a fit on the jobs that had ended before it."""
    proc = _harp(str(BUNDLED_TRACE), "--max-jobs", "3000", "--limits", "request,ours-rewrite,ours-extend",
                 "--period-days", "20", "--progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    fits = int(proc.stdout.split("ours: ")[1].split(" fits")[0])
    assert fits >= 2
    assert f"{fits}/{fits} fits" in proc.stderr
    # As the daemon: no limit for a user with nothing ended lately (policy.require_history).
    cold = int(proc.stdout.split("ours: ")[2].split(" jobs of users with no job ended lately")[0])
    assert 0 < cold < 1000
    # The rule lowers few jobs (its limit kills); the median lowers most (the guard extends).
    rule = proc.stdout.split("ours-rewrite: predictions for ")[1].split(" limits")[0]
    median = proc.stdout.split("ours-extend: predictions for ")[1].split(" limits")[0]
    served, lowered = int(median.split()[0]), int(median.split()[-1])
    assert served >= 1500 and lowered > max(served // 2, int(rule.split()[-1]))
    assert "| easy | ours-extend |" in proc.stdout


def test_config_names_the_policy_that_turns_predictions_into_limits(tmp_path: Path) -> None:
    from slurm_harp.simulation import load_workload

    jobs = load_workload(BUNDLED_TRACE).head(2000)
    predictions = tmp_path / "predicted.csv"
    rows = [f"{job_id},{jobs.request[i] * 0.95}" for i, job_id in enumerate(jobs.ids)]
    predictions.write_text("job_id,seconds\n" + "\n".join(rows) + "\n")
    config = tmp_path / "harp.toml"
    config.write_text("[policy]\nmin_gain = 0.0\n[policy.floor]\ntime_minutes = 1\n")
    common = ["--max-jobs", "2000", "--limits", "ours-extend", "--predictions", str(predictions)]
    site = _harp(str(BUNDLED_TRACE), *common, "--config", str(config))
    assert site.returncode == 0, site.stderr
    assert f"ours: policy from {config}: time floor 1 min, min_gain 0" in site.stdout
    defaults = _harp(str(BUNDLED_TRACE), *common)
    assert defaults.returncode == 0, defaults.stderr

    def lowered(out: str) -> int:
        return int(out.split("the policy lowers ")[1].split()[0])

    # 5 % off saves less than the default min_gain: nothing is cut; with min_gain 0, those
    # whose request is long enough for 5 % to round to a whole minute.
    assert lowered(defaults.stdout) == 0
    assert lowered(site.stdout) > 500
    config.write_text("[policy]\nmin_gain = 2\n")
    bad = _harp(str(BUNDLED_TRACE), *common, "--config", str(config))
    assert bad.returncode == 2 and "min_gain" in bad.stderr


def test_a_link_planted_at_an_output_is_replaced_not_written_through(tmp_path: Path) -> None:
    # `harp simulate --out` a directory others may write: run as root, the JSON and the plots went
    # through the links planted at their names, over any file.
    out, victim = tmp_path / "shared", tmp_path / "victim"
    out.mkdir()
    victim.write_text("root's file\n")
    (out / f"{TRACE}-easy.json").symlink_to(victim)
    (out / f"{TRACE}-easy-waits.png").symlink_to(victim)
    argv = ["simulate", str(BUNDLED_TRACE), "--max-jobs", "500", "--limits", "request", "--out", str(out)]
    assert main(argv) == 0
    assert victim.read_text() == "root's file\n"
    for name in ("easy.md", "easy.json", "easy-waits.png", "easy-bsld.png"):
        st = (out / f"{TRACE}-{name}").lstat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644, name
    assert json.loads((out / f"{TRACE}-easy.json").read_text())["runs"]


def test_the_json_of_a_one_job_trace_is_strict_json(tmp_path: Path) -> None:
    # One job: the utilisation window has no length (NaN), which JSON cannot hold; it is null.
    trace = tmp_path / "one.swf"
    trace.write_text("; MaxProcs: 8\n1 0 0 100 2 -1 -1 2 600 -1 1 1 1 1 1 1 -1 -1\n")
    assert main(["simulate", str(trace), "--limits", "request,easy++", "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "one-easy.json").read_text()

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON")

    doc = json.loads(text, parse_constant=refuse)
    assert [r["utilisation"] for r in doc["runs"]] == [None, None]
    assert doc["runs"][0]["mean_bsld"] == 1.0


def test_a_job_store_is_read_without_writing_to_it_and_another_file_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`harp simulate --db` opened the store to write: any SQLite file was given the job store's
    tables and switched to WAL, and a live store could be migrated under the harvest."""
    other = tmp_path / "notes.sqlite"
    with closing(sqlite3.connect(other)) as db, db:
        db.execute("CREATE TABLE notes (x)")
    before = other.read_bytes()
    assert main(["simulate", "--db", str(other), "--limits", "request"]) == 2
    assert f"{other}: not a job store made by harp (no such table: meta)" in caplog.text
    assert other.read_bytes() == before and not Path(f"{other}-wal").exists()


def test_a_trace_name_of_bad_tex_is_drawn_as_written(tmp_path: Path) -> None:
    """The plots' titles name the trace, any file name: matplotlib read `tr$\\frac{a$` as mathematics
    and `harp simulate --out` ended in a traceback drawing it, after writing the tables."""
    trace = tmp_path / "tr$\\frac{a$.swf"
    trace.write_bytes(gzip.decompress(BUNDLED_TRACE.read_bytes()))
    out = tmp_path / "out"
    assert main(["simulate", str(trace), "--max-jobs", "300", "--limits", "request", "--out", str(out)]) == 0
    assert (out / "tr$\\frac{a$-easy-waits.png").read_bytes()[:4] == b"\x89PNG"


ALL_BAD = "; MaxProcs: 8\n1 0 0 100 2 -1 -1 2 600 -1 1 1 1 1 1 1 -1\n"  # a field short


@pytest.mark.parametrize("content", ["", ALL_BAD], ids=["empty", "every-line-bad"])
def test_a_trace_without_a_job_to_replay_is_refused_and_nothing_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    """An empty trace, or one whose every line is bad, was "simulated": a table of NaN, exit 0, and
    Markdown, JSON and plots written with the trace and its processors null."""
    trace = tmp_path / "t.swf"
    trace.write_text(content)
    out = tmp_path / "out"
    assert main(["simulate", str(trace), "--limits", "request", "--out", str(out)]) == 2
    assert f"cannot simulate {trace}: no job to replay: 0 jobs read" in caplog.text
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("how", ["header", "--processors"])
def test_a_trace_of_jobs_all_wider_than_the_machine_is_refused_and_nothing_written(
    how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every job dropped as wider than the machine (an SWF header's MaxProcs too small, or
    --processors below every job): a table of NaN, exit 0, and its files written."""
    trace = tmp_path / "t.swf"
    header = "; MaxProcs: 2\n" if how == "header" else ""
    jobs = "".join(f"{i} {i} 0 100 4 -1 -1 4 600 -1 1 1 1 1 1 1 -1 -1\n" for i in range(1, 4))  # 4 wide
    trace.write_text(header + jobs)
    out = tmp_path / "out"
    machine = ["--processors", "2"] if how == "--processors" else []
    assert main(["simulate", str(trace), "--limits", "request", *machine, "--out", str(out)]) == 2
    said = "no job to replay: 3 jobs read (3 wider than the machine of 2 processors)"
    assert f"cannot simulate {trace}: {said}" in caplog.text
    assert not out.exists()
