"""`harp demo` (the README's first command) end to end on a slice of the bundled trace."""

from __future__ import annotations

import gzip
import itertools
import logging
from pathlib import Path

import pytest

from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE, not_a_file


def test_demo_trains_serves_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "kth-slice.swf"
    with gzip.open(BUNDLED_TRACE, "rt") as handle:
        trace.write_text("".join(itertools.islice(handle, 4000)))
    assert main(["demo", "--trace", str(trace), "--show", "3"]) == 0
    out = capsys.readouterr().out
    assert "training on the first" in out and "safety rule calibrated to 1 %" in out
    assert "over gRPC (Unix socket)" in out
    assert "newly killed" in out and "reservation waste" in out and "re-running the killed jobs" in out
    assert "% by the jobs that still finish" in out
    # Three sample decisions, then at most one rewritten job (show // 2), each with its outcome.
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("ok", "KILLED at new limit"))]
    assert 3 <= len(rows) <= 4


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
