"""A shadow-mode site's job store made from the bundled KTH-SP2 trace, its `harp report`, and the
screenshot in docs/images/report.png.

    PYTHONPATH=daemon:. .venv/bin/python -m experiments.shadow_report [--work DIR] [--screenshot PNG]

The reference model (models/reference: trained as `harp train` trains on the first 80 % of the
trace) answers every later job in shadow mode as the daemon would, with the user's history at
submission (harp demo's replay, the harvester's view). Each job then goes into a job store with the
tag the plugin writes to its AdminComment, as `harp harvest` stores it. `harp report` reads the last
30 days of that store, and headless chromium draws the page (tests/browser.py): the screenshot is
reduced to a palette so that it stays small in the repository.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main as harp
from slurm_harp.commands.demo import ReplayHistory, bundled_trace, split_trace
from slurm_harp.core.features import vectorize
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.tag import last_tag
from slurm_harp.server.reloader import reload_models
from tests.browser import screenshot
from tests.conftest import REPO, required_tool

REFERENCE = REPO / "models" / "reference"
SCREENSHOT = REPO / "docs" / "images" / "report.png"
WINDOW_DAYS = 30
SIZE = (1100, 2000)  # the summary, the per-mode table and plot, the partitions


def shadow_store(db: Path) -> int:
    """Write the replayed jobs with their shadow tags into a job store at ``db``; the latest end."""
    records, _, future = split_trace(bundled_trace(), 0.2)
    models = reload_models(REFERENCE, {}, None).models
    predictor = Predictor(Policy(default_mode=Mode.SHADOW), vectorize, models, history=ReplayHistory(records))
    tagged = [replace(job, harp_tag=last_tag(predictor.decide(job.request).annotation)) for job in future]
    with JobStore(db) as store:
        store.merge(tagged, "kth-shadow")
        latest = store.latest_end()
    assert latest is not None
    return latest


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, help="keep the job store and the report here")
    parser.add_argument("--screenshot", type=Path, default=SCREENSHOT, help="default: %(default)s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harp-shadow-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        db = work / "kth-shadow.db"
        db.unlink(missing_ok=True)
        latest = shadow_store(db)
        since = datetime.fromtimestamp(latest - WINDOW_DAYS * 86400, UTC).strftime("%Y-%m-%dT%H:%M")
        command = ["report", "--db", str(db), "--since", since, "--out", str(work / "report")]
        print("harp " + " ".join(command))
        if harp(command) != 0:
            raise SystemExit("harp report failed")
        shot = screenshot(required_tool("chromium", "chromium"), work / "report" / "index.html",
                          work / "full.png", SIZE)  # fmt: skip
        _shrink(shot, args.screenshot)
    print(f"{args.screenshot}: {args.screenshot.stat().st_size // 1024} KiB")


def _shrink(png: Path, out: Path) -> None:
    """A 128-colour palette: a page of text and flat plots loses nothing visible."""
    from PIL import Image

    out.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(png) as image:
        image.convert("RGB").quantize(colors=128).save(out, optimize=True)


if __name__ == "__main__":
    main()
