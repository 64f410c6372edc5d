"""`harp demo` (the README's first command) end to end on a slice of the bundled trace."""

from __future__ import annotations

import gzip
import itertools
import logging
import tempfile
from pathlib import Path

import pytest

from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE, REPO, not_a_file


def kth_slice(directory: Path, lines: int) -> Path:
    """The first ``lines`` lines of the bundled trace, as a trace in ``directory``."""
    trace = directory / "kth-slice.swf"
    with gzip.open(BUNDLED_TRACE, "rt") as handle:
        trace.write_text("".join(itertools.islice(handle, lines)))
    return trace


def test_demo_trains_serves_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = kth_slice(tmp_path, 4000)
    assert main(["demo", "--trace", str(trace), "--show", "3"]) == 0
    out = capsys.readouterr().out
    assert "training on the first" in out and "safety rule calibrated to 1 %" in out
    assert "over gRPC (Unix socket)" in out
    assert "newly killed" in out and "reservation waste" in out and "re-running the killed jobs" in out
    assert "% by the jobs that still finish" in out
    # Three sample decisions, then at most one rewritten job (show // 2), each with its outcome.
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("ok", "KILLED at new limit"))]
    assert 3 <= len(rows) <= 4


def test_demo_says_when_the_replayed_jobs_left_no_waste(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every replayed job ran to its request: no waste to cut, said so (it printed "cut by nan %")."""
    lines = kth_slice(tmp_path, 4000).read_text().splitlines()
    jobs = [i for i, line in enumerate(lines) if line.strip() and not line.startswith(";")]
    for i in jobs[len(jobs) * 3 // 4 :]:  # past the demo's 80 % of training, and then some
        fields = lines[i].split()
        if int(fields[8]) > 0:
            fields[3] = fields[8]  # ran its requested time (SWF: run time, then requested time)
        lines[i] = " ".join(fields)
    trace = tmp_path / "ran-to-request.swf"
    trace.write_text("\n".join(lines) + "\n")
    assert main(["demo", "--trace", str(trace), "--show", "2"]) == 0
    out = capsys.readouterr().out
    assert "no reservation waste to cut" in out and "nan" not in out


def test_demo_names_an_unreadable_trace(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a trace\n")
    assert main(["demo", "--trace", str(bad)]) == 2
    assert f"cannot read {bad}" in caplog.text
    # The demo quiets slurm_harp's INFO lines while it runs, not after.
    assert logging.getLogger("slurm_harp").level == logging.NOTSET


@pytest.mark.timeout(10)  # open() of a FIFO waited for a writer: the test fails, not hangs
@pytest.mark.parametrize("kind", ["FIFO", "directory"])
def test_demo_refuses_a_trace_that_is_no_regular_file(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    said = not_a_file(tmp_path / "trace.swf", kind)
    assert main(["demo", "--trace", str(tmp_path / "trace.swf")]) == 2
    assert f"cannot read {tmp_path / 'trace.swf'}: {tmp_path / 'trace.swf'} is {said}" in caplog.text


def test_demo_says_a_store_that_is_no_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A mistyped --store served no model: every job "no_model", exit 0, not a word of the path."""
    assert main(["demo", "--store", str(tmp_path / "none"), "--trace", str(BUNDLED_TRACE)]) == 2
    assert f"no model store at {tmp_path / 'none'}" in caplog.text
    assert not (tmp_path / "none").exists()


def test_demo_says_a_store_without_a_time_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A directory one level above the store (models/ for models/reference), or an empty one,
    served no model: every job "no_model", exit 0."""
    (tmp_path / "models" / "reference" / "time").mkdir(parents=True)
    for store in (tmp_path / "models", tmp_path / "models" / "reference"):
        caplog.clear()
        assert main(["demo", "--store", str(store), "--trace", str(BUNDLED_TRACE)]) == 2
        assert f"no time model in {store} (give the directory holding time/CURRENT)" in caplog.text


def test_demo_in_a_tmpdir_too_long_for_its_socket_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's socket is made in $TMPDIR: one too long for a socket's path ended the demo in a
    DaemonError traceback (after training). Said before training, naming TMPDIR, exit 2."""
    long_tmp = tmp_path / ("d" * 100)
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    trace = kth_slice(tmp_path, 400)
    assert main(["demo", "--trace", str(trace)]) == 2
    assert "the demo's socket" in caplog.text and "(it is made in $TMPDIR)" in caplog.text
    assert "Traceback" not in caplog.text and not any(long_tmp.iterdir())


def test_demo_whose_daemon_cannot_start_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from slurm_harp.server.daemon import Daemon
    from slurm_harp.server.socket_path import DaemonError

    def cannot(_: object) -> None:
        raise DaemonError("server.socket: cannot listen")

    monkeypatch.setattr(Daemon, "start", cannot)
    trace = kth_slice(tmp_path, 400)
    assert main(["demo", "--trace", str(trace), "--store", str(REPO / "models" / "reference")]) == 2
    assert "the demo's daemon cannot start: server.socket: cannot listen" in caplog.text


def test_demo_serves_a_store_given_relative_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`harp demo --store models/reference`, as models/README.md says, though harp.toml's paths must
    be absolute: the demo gives its daemon the store's absolute path."""
    trace = kth_slice(tmp_path, 400)
    monkeypatch.chdir(REPO)
    assert main(["demo", "--trace", str(trace), "--store", "models/reference", "--show", "1"]) == 0
    assert "over gRPC (Unix socket)" in capsys.readouterr().out
