"""Shared set-up for the benchmarks: training the bundled model in a separate process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import BUNDLED_TRACE

if TYPE_CHECKING:
    pass


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
