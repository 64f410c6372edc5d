"""`harp evaluate` and `harp simulate` run again into the --out of an earlier run: the files left
there are one run's, and a run that fails leaves no table claiming it complete."""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path

import pytest

from slurm_harp import output_dir, state_dir
from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE
from tests.integration.test_trace_inputs_cli import COMMANDS, OPTIONS

TRACE = "KTH-SP2-1996-2.1-cln"
WRITES = {
    "evaluate": [f"{TRACE}.json", f"{TRACE}.md", f"{TRACE}.png"],
    "simulate": [f"{TRACE}-easy{end}" for end in ("-bsld.png", "-waits.png", ".json", ".md")],
}


def run(command: str, out: Path, *options: str) -> int:
    return main([command, str(BUNDLED_TRACE), *OPTIONS[command], *options, "--out", str(out)])


def names(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


def test_a_run_with_nothing_to_plot_leaves_no_plot_of_the_run_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run, then one of ours alone where ours cannot run (no train extra: no strategy scored,
    nothing to plot) into one --out: the first run's PNG stayed beside the second's tables, as if
    it were theirs. (A run whose every target is skipped, `--target memory` on KTH, writes nothing:
    test_evaluate_cli.py::test_a_trace_whose_every_target_is_skipped_is_said_and_nothing_written.)"""
    out = tmp_path / "out"
    assert run("evaluate", out) == 0 and names(out) == WRITES["evaluate"]
    monkeypatch.setitem(sys.modules, "slurm_harp.evaluation.ours", None)  # import: ImportError
    assert run("evaluate", out, "--strategies", "ours") == 0
    assert names(out) == [f"{TRACE}.json", f"{TRACE}.md"]
    assert "ours: not evaluated: our strategy needs the train extra" in (out / f"{TRACE}.md").read_text()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_run_without_matplotlib_leaves_no_plot_of_the_run_before(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert run(command, out) == 0 and names(out) == WRITES[command]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    assert run(command, out) == 2
    assert names(out) == [n for n in WRITES[command] if not n.endswith(".png")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_plot_that_cannot_be_written_leaves_no_table_nor_file_of_the_run_before(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk that filled after the tables: the new tables were written over the earlier run's,
    the earlier run's plots kept beside them; then the table was written last, but a plot the run
    failed to write stayed as the earlier run left it, beside the new JSON. Now only the new
    run's JSON is there."""
    out = tmp_path / "out"
    assert run(command, out) == 0
    for earlier in out.iterdir():  # marked: any file left of the earlier run is seen
        earlier.write_bytes(b"the earlier run's")
    replace_at = state_dir.replace_at

    def no_room_for_plots(directory: int, name: str, data: bytes, mode: int) -> None:
        if name.endswith(".png"):
            raise OSError(errno.ENOSPC, "No space left on device")
        replace_at(directory, name, data, mode)

    monkeypatch.setattr(output_dir, "replace_at", no_room_for_plots)
    assert run(command, out) == 2
    assert "png: No space left on device" in caplog.text
    assert names(out) == [n for n in WRITES[command] if n.endswith(".json")]
    assert all(p.read_bytes() != b"the earlier run's" for p in out.iterdir())


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_at_an_output_name_is_said_as_not_removable(
    command: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run removes every file of an earlier run before it writes: a directory in the way was
    said as `cannot write`, naming the plot, after the table and JSON were written."""
    out = tmp_path / "out"
    plot = out / next(n for n in WRITES[command] if n.endswith(".png"))
    plot.mkdir(parents=True)
    assert run(command, out) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"cannot remove {plot}: {os.strerror(errno.EISDIR)}"]
    assert names(out) == [plot.name]
