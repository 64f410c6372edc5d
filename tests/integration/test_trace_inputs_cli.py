"""`harp evaluate` and `harp simulate` given a trace that is no regular file or has a long name,
and with --out on a host without matplotlib; `harp import` given such a file; `harp report --db`
and `harp train --db` given a job store that is no regular file."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import pytest

from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE, not_a_file

# Each command's arguments but its trace and --out: a slice the tests run quickly.
OPTIONS = {
    "evaluate": ["--max-jobs", "1000", "--target", "time", "--strategies", "request"],
    "simulate": ["--max-jobs", "300", "--limits", "request"],
}
COMMANDS = sorted(OPTIONS)


@pytest.mark.timeout(20)  # open() of a FIFO waits for a writer: the test fails, not hangs
@pytest.mark.parametrize("kind", ["FIFO", "directory"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_that_is_no_regular_file_is_named_so(
    command: str, kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both said "no such file" of a directory or a FIFO that was there; `harp demo`'s wording."""
    trace = tmp_path / "trace.swf"
    said = not_a_file(trace, kind)
    assert main([command, str(trace), *OPTIONS[command]]) == 2
    assert f"cannot read {trace}: {trace} is {said}" in caplog.text
    assert main([command, str(tmp_path / "none.swf")]) == 2
    assert f"{tmp_path / 'none.swf'}: no such file" in caplog.text


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", ["FIFO", "directory"])
def test_an_import_of_what_is_no_regular_file_is_named_so(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`harp import` said "no such file" of a FIFO or a directory that was there; nothing is read,
    nor the job store made, when one of the files is no file."""
    trace, good = tmp_path / "trace.swf", tmp_path / "good.swf.gz"
    said = not_a_file(trace, kind)
    good.symlink_to(BUNDLED_TRACE)
    db = tmp_path / "jobs.sqlite"
    missing = tmp_path / "none.swf"
    assert main(["import", "--db", str(db), str(good), str(trace), str(missing)]) == 2
    assert f"nothing imported: cannot read {trace}: {trace} is {said}; {missing}: no such file" in caplog.text
    assert not db.exists()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", ["FIFO", "directory"])
@pytest.mark.parametrize("command", ["report", "train"])
def test_a_job_store_that_is_no_regular_file_is_named_so(
    command: str,
    kind: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--db` of a FIFO or a directory: `harp report` said "no job store at" and `harp train` "no
    such file" of a path that was there."""
    db = tmp_path / "jobs.db"
    said = not_a_file(db, kind)
    where = ["--out", str(tmp_path / "out")] if command == "report" else ["--store", str(tmp_path / "store")]
    assert main([command, "--db", str(db), *where]) == 2
    assert f"cannot read {db}: {db} is {said}" in caplog.text + capsys.readouterr().out
    assert not (tmp_path / "out").exists() and not (tmp_path / "store").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_pipe_is_refused_as_no_regular_file(command: str, caplog: pytest.LogCaptureFixture) -> None:
    """`harp evaluate <(zcat t.swf.gz)`: a pipe's /dev/fd/N names no format (it would be read as
    sacct text), and simulate reads an SWF's header before its jobs: refused, saying what it is."""
    read, write = os.pipe()
    try:
        pipe = f"/dev/fd/{read}"
        assert main([command, pipe, *OPTIONS[command]]) == 2
    finally:
        os.close(read)
        os.close(write)
    assert f"cannot read {pipe}: {pipe} is a FIFO, not a regular file" in caplog.text


@pytest.mark.parametrize("command", COMMANDS)
def test_a_trace_name_of_245_bytes_is_written(command: str, tmp_path: Path) -> None:
    """A legal name whose outputs' temporary names were over 255 bytes: ENAMETOOLONG after all the
    work, exit 1, nothing written."""
    trace = tmp_path / ("y" * 238 + ".swf.gz")  # 245 bytes; the outputs are named "y" * 238 + ...
    trace.symlink_to(BUNDLED_TRACE)
    out = tmp_path / "out"
    assert main([command, str(trace), *OPTIONS[command], "--out", str(out)]) == 0
    suffix = {"evaluate": ".json", "simulate": "-easy.json"}[command]
    assert (out / ("y" * 238 + suffix)).is_file()


@pytest.mark.parametrize("command", COMMANDS)
def test_without_matplotlib_the_tables_are_kept_and_the_extra_named(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the train extra both ended in a ModuleNotFoundError traceback after writing the
    Markdown and JSON; `harp report` names the extra, exit 2."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    out = tmp_path / "out"
    assert main([command, str(BUNDLED_TRACE), *OPTIONS[command], "--out", str(out)]) == 2
    assert "matplotlib is needed for the plot" in caplog.text
    assert "pip install 'slurm-harp[train]'" in caplog.text
    written = sorted(p.name for p in out.iterdir())
    assert [Path(n).suffix for n in written] == [".json", ".md"]
    assert capsys.readouterr().out.endswith(f"wrote {out / written[1]}, {out / written[0]}\n")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_name_too_long_is_said_before_the_work(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A legal 251-byte trace name gives outputs of over 255 bytes: the write failed only after the
    whole computation, and evaluate left its .md without its .json."""
    trace, out = tmp_path / ("y" * 251 + ".swf"), tmp_path / "out"  # 255 bytes
    trace.write_bytes(gzip.decompress(BUNDLED_TRACE.read_bytes()))
    assert main([command, str(trace), *OPTIONS[command], "--out", str(out)]) == 2
    assert "File name too long" in caplog.text and "bytes, over the 255 a name may have" in caplog.text
    assert capsys.readouterr().out == ""  # no table: nothing computed
    assert not out.exists()
