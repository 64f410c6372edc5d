"""`harp simulate --predictions FILE`: the limits a site gives, read or refused naming the file."""

from __future__ import annotations

import argparse
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from slurm_harp.accounting.store_schema import SchemaVersionError
from slurm_harp.commands import predictions
from slurm_harp.commands.predictions import fitted_predictions, read_predictions
from slurm_harp.core.policy import Policy
from tests.conftest import not_a_file


def test_json_and_csv_give_seconds_per_job(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text('{"1": 600, "2": 0, "3": 1.5e3}')
    (tmp_path / "p.csv").write_text("job_id,seconds\n1,600\n 2 ,0\n3,1.5e3\n")
    expected = {"1": 600.0, "2": 0.0, "3": 1500.0}
    assert read_predictions(tmp_path / "p.json") == read_predictions(tmp_path / "p.csv") == expected


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("p.json", '{"7": Infinity}', "p.json: job 7: expected a finite number of seconds >= 0, not 'inf'"),
        ("p.json", '{"7": NaN}', "p.json: job 7: expected a finite number"),
        ("p.json", '{"7": -5}', "p.json: job 7: expected a finite number"),
        ("p.json", '{"7": [1, 2]}', "p.json: job 7: expected a finite number"),
        ("p.json", '{"7": true}', "p.json: job 7: expected a finite number"),
        ("p.json", '{"7": "600"}', "p.json: job 7: expected a finite number"),
        ("p.json", '{"7": 1' + "0" * 400 + "}", "p.json: job 7: expected a finite number"),
        ("p.json", '{"7": 1' + "0" * 5000 + "}", "p.json: not valid JSON: Exceeds the limit"),
        ("p.json", "[" * 100_000 + "]" * 100_000, "p.json: not valid JSON: nested too deeply to read"),
        ("p.json", "{7: 1}", "p.json: not valid JSON: Expecting property name"),
        ("p.json", "[600]", "p.json: expected a JSON object of job id -> seconds"),
        ("p.csv", "job_id,seconds\n7,inf\n", "p.csv:2: expected a finite number of seconds >= 0, not 'inf'"),
        ("p.csv", "7,-1\n", "p.csv:1: expected a finite number"),
        ("p.csv", "7,600,1\n", "p.csv:1: expected job_id,seconds"),
        # A garbled first row was taken for a header and dropped without a word (its last field
        # not a number); the same row on line 2 was refused.
        ("p.csv", "19,600,oops\n20,600\n", "p.csv:1: expected job_id,seconds"),
        ("p.csv", "19,oops\n20,600\n", "p.csv:1: expected job_id,seconds"),
        ("p.csv", "job_id,seconds,note\n20,600\n", "p.csv:1: expected job_id,seconds"),
        ("p.csv", "job_id,seconds\n19,600,oops\n", "p.csv:2: expected job_id,seconds"),
    ],
)
def test_what_is_no_limit_is_refused_naming_the_file_and_job(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError) as caught:
        read_predictions(tmp_path / name)
    assert str(caught.value).startswith(f"{tmp_path}/{message}")


@pytest.mark.parametrize("header", ["job_id,seconds", "id,limit_s", '"job id","seconds"'])
def test_a_first_row_of_two_names_is_a_header(tmp_path: Path, header: str) -> None:
    (tmp_path / "p.csv").write_text(f"{header}\n19,600\n")
    assert read_predictions(tmp_path / "p.csv") == {"19": 600.0}


@pytest.mark.timeout(20)  # open() of a FIFO waited for a writer for good: the test fails, not hangs
@pytest.mark.parametrize("kind", ["FIFO", "directory", "device"])
def test_a_file_that_is_no_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """A FIFO hung `harp simulate --predictions` for good, and /dev/zero ended in a MemoryError
    (/dev/null, the device here, read as no prediction at all)."""
    path = Path("/dev/null") if kind == "device" else tmp_path / "p.csv"
    said = "a character device, not a regular file" if kind == "device" else not_a_file(path, kind)
    with pytest.raises(OSError, match=f"^{re.escape(str(path))} is {said}$"):
        read_predictions(path)


def test_a_file_larger_than_any_predictions_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(predictions, "MAX_BYTES", 16)
    (tmp_path / "p.csv").write_text("1,600\n2,600\n3,600\n")  # 18 bytes
    with pytest.raises(ValueError, match=r"p\.csv: larger than 16 bytes, the most harp reads"):
        read_predictions(tmp_path / "p.csv")
    (tmp_path / "p.csv").write_text("1,600\n2,600\n3,6\n")
    assert read_predictions(tmp_path / "p.csv") == {"1": 600.0, "2": 600.0, "3": 6.0}


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_bytes(b"\xff\xfe,\x00\n")
    with pytest.raises(ValueError, match=r"p\.csv: not UTF-8 text"):
        read_predictions(tmp_path / "p.csv")


def test_predictions_leave_a_job_that_asked_for_no_limit_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Job 2 asked for no limit (SWF requested time -1): the daemon leaves it alone (NOT_REQUESTED),
    # where the replay lowered its stand-in request (the trace's longest, 2 h) like any other.
    from slurm_harp.cli import main

    trace = tmp_path / "t.swf"
    trace.write_text(
        "1 0 0 3000 4 -1 -1 4 7200 -1 1 1 1 1 1 1 -1 -1\n2 10 0 3000 4 -1 -1 4 -1 -1 1 2 1 1 1 1 -1 -1\n"
    )
    (tmp_path / "p.json").write_text('{"1": 3600, "2": 3600}')
    argv = ["simulate", str(trace), "--limits", "ours-extend", "--predictions", str(tmp_path / "p.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "ours-extend: predictions for 2 of 2 jobs; the policy lowers 1 limits" in out
    assert "t: 2 jobs on 4 processors, 1 asking for no limit, scheduler easy" in out


def _three_jobs(tmp_path: Path) -> Path:
    trace = tmp_path / "t.swf"
    trace.write_text("".join(f"{i} {i} 0 3000 4 -1 -1 4 7200 -1 1 {i} 1 1 1 1 -1 -1\n" for i in (1, 2, 3)))
    return trace


@pytest.mark.parametrize(
    ("content", "slice_", "said"),
    [
        ('{"901": 600, "902": 60}', [], "none of its 2 job ids is a job replayed from t"),
        (
            '{"2": 600, "3": 60}',
            ["--max-jobs", "1"],
            "none of its 2 job ids is a job replayed from the first 1 jobs of t (--max-jobs)",
        ),
        ("{}", [], "holds no prediction"),
    ],
)
def test_a_file_that_names_no_job_replayed_is_refused_and_nothing_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, slice_: list[str], said: str
) -> None:
    """A file made for another trace (or another --max-jobs slice) was taken: every ours-* row the
    request's, exit 0, and only "predictions for 0 of 3 jobs" said."""
    from slurm_harp.cli import main

    trace, out = _three_jobs(tmp_path), tmp_path / "out"
    (tmp_path / "p.json").write_text(content)
    argv = [
        "simulate",
        str(trace),
        *slice_,
        "--limits",
        "ours-extend",
        "--predictions",
        str(tmp_path / "p.json"),
    ]
    assert main([*argv, "--out", str(out)]) == 2
    assert f"cannot simulate {trace}: {tmp_path}/p.json: {said}" in caplog.text
    assert not out.exists()


def test_ids_the_replay_lacks_are_counted_and_the_first_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file for the whole trace run on a --max-jobs slice is fine, said in a warning; so is one
    naming a few jobs the trace lacks."""
    from slurm_harp.cli import main

    trace = _three_jobs(tmp_path)
    ids = [str(i) for i in range(1, 10)]
    (tmp_path / "p.csv").write_text("".join(f"{job},3600\n" for job in ids))
    argv = ["simulate", str(trace), "--limits", "ours-extend", "--predictions", str(tmp_path / "p.csv")]
    assert main([*argv, "--max-jobs", "2"]) == 0
    unused = "7 of its 9 job ids left unused, no job replayed from the first 2 jobs of t (--max-jobs)"
    assert f"{tmp_path}/p.csv: {unused}: '3', '4', '5', '6', '7', ...\n" in caplog.text
    assert "ours-extend: predictions for 2 of 2 jobs" in capsys.readouterr().out
    caplog.clear()
    assert main(argv) == 0
    assert (
        f"{tmp_path}/p.csv: 6 of its 9 job ids left unused, no job replayed from t: "
        "'4', '5', '6', '7', '8', ..." in caplog.text
    )
    (tmp_path / "p.csv").write_text("1,3600\n2,3600\n3,3600\n")
    caplog.clear()
    assert main(argv) == 0
    assert "left unused" not in caplog.text


@pytest.mark.parametrize(
    ("name", "content", "at", "before"),
    [
        ("p.csv", "1,600\n2,60\n1,60000\n", ":3", "line 1"),
        ("p.json", '{"1": 600, "2": 60, "1": 60000}', "", "before"),
    ],
    ids=["csv", "json"],
)
def test_a_job_listed_twice_with_two_limits_is_refused_naming_both(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, content: str, at: str, before: str
) -> None:
    """The last line (or key) was taken without a word: `1,600` then `1,60000` replayed job 1 at
    60000 s, exit 0, whichever the site meant."""
    from slurm_harp.cli import main

    trace, out = _three_jobs(tmp_path), tmp_path / "out"
    (tmp_path / name).write_text(content)
    argv = ["simulate", str(trace), "--limits", "ours-extend", "--predictions", str(tmp_path / name)]
    assert main([*argv, "--out", str(out)]) == 2
    said = f"{name}{at}: job '1' listed again with another limit, 60000 s ({before}: 600 s)"
    assert f"cannot simulate {trace}: {tmp_path}/{said}" in caplog.text
    assert not out.exists()


@pytest.mark.parametrize(
    ("name", "content"),
    [("p.csv", "7,600\n8,60\n7,600.0\n8,60\n"), ("p.json", '{"7": 600, "8": 60, "7": 600.0, "8": 60}')],
    ids=["csv", "json"],
)
def test_a_job_listed_twice_with_one_limit_is_taken_once_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, content: str
) -> None:
    (tmp_path / name).write_text(content)
    assert read_predictions(tmp_path / name) == {"7": 600.0, "8": 60.0}
    assert caplog.messages == [
        f"{tmp_path}/{name}: 2 job ids listed again with the same limit, taken once: '7', '8'"
    ]


def test_ours_fitted_along_a_job_store_reads_it_without_writing_to_it(tmp_path: Path) -> None:
    """`harp simulate --db` fitting ours opened the store read-write: any SQLite file was given the
    job store's tables, and a live store could be migrated under the harvest."""
    other = tmp_path / "notes.sqlite"
    with closing(sqlite3.connect(other)) as db, db:
        db.execute("CREATE TABLE notes (x)")
    args = argparse.Namespace(
        db=True, source=str(other), period_days=7.0, quantile=0.5, limits=["ours-rewrite"]
    )
    with pytest.raises(SchemaVersionError, match=r"notes\.sqlite: not a job store made by harp"):
        fitted_predictions(args, set(), Policy())
    with closing(sqlite3.connect(other)) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
