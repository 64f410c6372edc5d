"""`harp report`'s page as a real browser shows it: Debian's chromium, headless, offline.

A job store of a few hundred shadow-tagged jobs over three partitions (one named like markup) goes
through the command; chromium's DOM must hold every section, the rows of each partition and mode,
and the four plots, with the markup-like name as text; its screenshot must be the size asked, not
blank, and show the plots' colours (an image that failed to load would not).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from tests.browser import dump_dom, screenshot
from tests.conftest import required_tool

END = 1_790_000_000
PARTITIONS = ("batch", "gpu", "<b>debug</b>")
HEADINGS = [
    "Summary",
    "What each mode would have done",
    "Waste and kills per partition",
    "Predicted vs actual",
    "Actual / predicted",
    "How to read it",
]
WASTE_ORANGE = np.array([0xD9, 0x82, 0x2B]) / 255  # the modes plot's waste bars


def shadow_jobs(n: int = 400) -> list[JobRecord]:
    """Runs of 5 min to 10 h; users ask 1.5-8 times that; harp's value is the run x 0.7-2."""
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(n):
        run = float(np.exp(rng.uniform(np.log(5), np.log(600))))
        limit = int(run * rng.uniform(1.5, 8)) + 1
        value = max(1, round(run * rng.uniform(0.7, 2.0)))
        request = JobRequest(partition=PARTITIONS[i % 3], min_cpus=int(rng.integers(1, 33)),
                             time_limit_minutes=limit, submit_time=END - i * 600 - int(run * 60))  # fmt: skip
        tag = f"harp:shadow,t={value},v=20261101T000000.000000Z" if i % 10 else None
        jobs.append(JobRecord(str(i), request, "COMPLETED", int(run * 60), end_time=END - i * 600,
                              alloc_cpus=request.min_cpus, harp_tag=tag))  # fmt: skip
    return jobs


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("report")
    with JobStore(work / "jobs.db") as store:
        store.merge(shadow_jobs(), "slurm")
    out = work / "report"
    assert main(["report", "--db", str(work / "jobs.db"), "--since", "2026-09-01", "--out", str(out)]) == 0
    return out / "index.html"


def test_the_browser_renders_every_section_row_and_plot(page: Path) -> None:
    dom = dump_dom(required_tool("chromium", "chromium"), page)
    assert re.findall(r"<h2>([^<]*)</h2>", dom) == HEADINGS
    assert "<h1>slurm-harp report: jobs that ended since 2026-09-01 00:00 UTC</h1>" in dom
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", dom)
    assert "batch" in cells and "gpu" in cells
    assert "&lt;b&gt;debug&lt;/b&gt;" in cells and "<b>debug" not in dom  # text, not markup
    for mode in ("off / shadow", "time_min", "extend", "rewrite"):
        assert any(c.startswith(mode) for c in cells), mode
    assert "400" in cells and "360" in cells  # jobs, and the tagged ones (every tenth has no tag)
    images = re.findall(r'<img src="([^"]+)"', dom)
    assert images == ["modes.png", "partitions.png", "predicted-vs-actual.png", "ratio-cdf.png"]
    assert all((page.parent / name).stat().st_size > 10_000 for name in images)


def test_the_page_has_no_script_and_fetches_nothing(page: Path) -> None:
    # docs/install.md: "open it from disk, or copy the directory to any web server".
    html = page.read_text()
    assert not re.search(r"<script|\son[a-z]+\s*=|javascript:", html, re.I)
    assert not re.search(r"<(link|iframe|object|embed|base)\b|@import|url\(", html, re.I)
    targets = re.findall(r'\b(?:src|href|srcset|action)\s*=\s*"([^"]*)"', html, re.I)
    files = [t for t in targets if not t.startswith("#")]
    assert files and all(re.fullmatch(r"[a-z0-9-]+\.png", t) for t in files), targets
    assert all((page.parent / t).is_file() for t in files)


def test_the_screenshot_is_the_page_with_its_plots(page: Path, tmp_path: Path) -> None:
    import matplotlib.image

    shot = screenshot(required_tool("chromium", "chromium"), page, tmp_path / "shot.png", (1280, 2000))
    pixels = matplotlib.image.imread(shot)[:, :, :3]
    assert pixels.shape == (2000, 1280, 3)
    colours = np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 200, "a blank or text-only page"
    orange = np.all(np.abs(pixels - WASTE_ORANGE) < 0.03, axis=2)
    assert orange.sum() > 2_000, "the modes plot is not drawn"
