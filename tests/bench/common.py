"""Shared set-up for benchmarks."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_harp.core.request import Target
from tests.conftest import BUNDLED_TRACE, SHARED_TRACES

if TYPE_CHECKING:
    from slurm_harp.evaluation.split import Timeline
    from slurm_harp.learning.strategy import Seen


def train_argv(source: Path, store: Path, *extra: str) -> list[str]:
    """`harp train` from ``source`` into ``store`` as a separate process, warnings only."""
    cli = [sys.executable, "-m", "slurm_harp.cli", "--log-level", "WARNING", "train"]
    return [*cli, "--source", str(source), "--store", str(store), *extra]


def train_bundled(store: Path) -> None:
    """Train the walltime model on the bundled KTH-SP2 trace into ``store`` (as `harp train` does)."""
    subprocess.run(
        train_argv(BUNDLED_TRACE, store),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def shared_timeline(trace: str) -> tuple[Path, Timeline]:
    """The shared trace whose name starts with ``trace`` (e.g. "KTH"), split as `harp evaluate` does."""
    from slurm_harp.accounting import load_records
    from slurm_harp.evaluation.split import chronological_split

    path = next(iter(sorted(SHARED_TRACES.glob(f"{trace}*"))))
    return path, chronological_split(load_records(path))


def fitted_ours(
    timeline: Timeline, target: Target, budget: float
) -> tuple[list[tuple[str, float]], Seen, Seen]:
    """Ours fitted as `harp evaluate` fits it (refit included): its candidate rungs, and what the rule
    sees of the validation and of the test window (every member's predictions), for the studies."""
    from slurm_harp.learning.fitting import rung_candidates
    from slurm_harp.learning.strategy import HarpStrategy

    jobs, split = timeline.jobs, timeline.split
    ours = HarpStrategy(target)
    ours.fit(jobs, split, budget)
    fitted = ours.fitted
    assert fitted is not None
    rungs = rung_candidates(fitted.members, fitted.chosen, ours.config)
    val = ours.member_predictions(jobs, split.train_end, split.validation_end)
    return rungs, val, ours.member_predictions(jobs, split.validation_end)


def study_parser(doc: str, traces: str) -> argparse.ArgumentParser:
    """A study's command line: ``--traces`` (shared traces' name prefixes, comma-separated;
    ``traces`` by default) and ``--target``; a study adds its own options."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=traces)
    parser.add_argument("--target", default="time", choices=[t.value for t in Target])
    return parser


def per_trace(doc: str, study: Callable[[str, Target], None], traces: str) -> None:
    """``study(trace, target)`` for each of ``--traces`` and ``--target`` (study_parser)."""
    args = study_parser(doc, traces).parse_args()
    for trace in args.traces.split(","):
        study(trace, Target(args.target))
