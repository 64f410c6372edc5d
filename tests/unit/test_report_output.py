"""`harp report`'s page when a file of it cannot be written, and when the tags hold memory or CPU
predictions only."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

from slurm_harp import output_dir, state_dir
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.evaluation import site_report_plots
from tests.unit.test_site_report import JOBS, START, V, job

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
    assert capsys.readouterr().out.startswith(f"harp report: cannot remove {out / 'index.html'}: ")


def memory_only(i: int) -> JobRecord:
    """A job whose tag holds a memory prediction only: no time model served."""
    end = START + 3600 + i
    request = JobRequest(partition="a", min_cpus=2, time_limit_minutes=100, mem_per_node_mb=8000,
                         min_nodes=1, submit_time=end - 7200)  # fmt: skip
    return JobRecord(str(i), request, "COMPLETED", 3000, start_time=end - 3000, end_time=end, alloc_cpus=2,
                     max_rss_mb=1000.0 + i, harp_tag=f"harp:shadow,m=2000,v={V}")  # fmt: skip


def test_memory_figures_without_time_predictions_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tags with a memory prediction and no time one: the memory row was computed, yet the page
    said only "none has a time prediction", and the command exited 1 (nothing to report)."""
    db, out = store_of(tmp_path / "jobs.db", [memory_only(i) for i in range(40)]), tmp_path / "report"
    assert main(["report", "--db", str(db), "--since", SINCE, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "40 tagged (0 untagged skipped); no time prediction to compare: the figures of memory only" in said
    page = (out / "index.html").read_text()
    assert "None of the 40 tagged jobs has a time prediction" in page
    assert '<tr><td>memory</td><td class="n">40</td><td class="n">100.0 %</td>' in page
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]  # no time plot


def test_tags_with_no_prediction_to_compare_are_nothing_to_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = store_of(tmp_path / "jobs.db", [job("1", f"harp:shadow,v={V}", 40)])
    assert main(["report", "--db", str(db), "--since", SINCE, "--out", str(tmp_path / "r")]) == 1
    assert "None of the 1 tagged jobs has a time prediction" in capsys.readouterr().out


def a_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], Path, bytes]:
    """A report run once: its argv, its directory and its page."""
    db, out = store_of(tmp_path / "jobs.db", JOBS), tmp_path / "report"
    argv = ["report", "--db", str(db), "--since", SINCE, "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    return argv, out, (out / "index.html").read_bytes()


def test_without_matplotlib_the_page_of_the_run_before_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timer publishing the page on a host that lost the train extra: the page was removed before
    matplotlib was imported, leaving the plots of the run before and no index.html."""
    argv, out, page = a_page(tmp_path, capsys)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    assert main(argv) == 2
    said = capsys.readouterr().out
    assert said == "harp report: matplotlib is needed for the plots: pip install 'slurm-harp[train]'\n"
    assert (out / "index.html").read_bytes() == page


def test_a_plot_that_cannot_be_drawn_is_one_line_and_keeps_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, out, page = a_page(tmp_path, capsys)

    def cannot_draw(report: object, ax: object) -> None:
        raise ValueError("Image size of 700x90000000 pixels is too large")

    monkeypatch.setattr(site_report_plots, "_scatter", cannot_draw)
    assert main(argv) == 2
    said = capsys.readouterr().out
    assert said == (
        "harp report: cannot draw predicted-vs-actual.png: Image size of 700x90000000 pixels is too large\n"
    )
    assert (out / "index.html").read_bytes() == page
