"""`harp report`'s page when a file of it cannot be written."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from slurm_harp import output_dir, state_dir
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.core.job import JobRecord
from tests.unit.test_site_report import JOBS

SINCE = "2026-09-21"  # the day of START


def store_of(path: Path, jobs: list[JobRecord]) -> Path:
    with JobStore(path) as store:
        store.merge(jobs, "slurm")
    return path


def test_a_plot_that_cannot_be_written_is_named_and_leaves_no_page_over_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk (or an --out the caller may not write) ended `harp report` in an OSError
    traceback with exit 1, which says "nothing to report"; a failure midway left the page of the
    run before over the new run's first plots."""
    db, out = store_of(tmp_path / "jobs.db", JOBS), tmp_path / "report"
    argv = ["report", "--db", str(db), "--since", SINCE, "--out", str(out)]
    assert main(argv) == 0
    assert (out / "index.html").is_file()
    capsys.readouterr()
    written = state_dir.replace_at

    def disk_full_at_the_third_plot(directory: int, name: str, data: bytes, mode: int) -> None:
        if name == "predicted-vs-actual.png":
            raise OSError(errno.ENOSPC, "No space left on device")
        written(directory, name, data, mode)

    monkeypatch.setattr(output_dir, "replace_at", disk_full_at_the_third_plot)
    assert main(argv) == 2
    said = capsys.readouterr().out
    assert said == f"harp report: cannot write {out / 'predicted-vs-actual.png'}: No space left on device\n"
    assert not (out / "index.html").exists()  # the earlier run's page is gone: no page of two runs


def test_a_page_that_cannot_be_removed_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = store_of(tmp_path / "jobs.db", JOBS), tmp_path / "report"
    (out / "index.html").mkdir(parents=True)  # no file to unlink: EISDIR
    assert main(["report", "--db", str(db), "--since", SINCE, "--out", str(out)]) == 2
    assert capsys.readouterr().out.startswith(f"harp report: cannot write {out / 'index.html'}: ")
