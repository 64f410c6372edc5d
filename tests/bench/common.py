"""Shared set-up for benchmarks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import BUNDLED_TRACE


def train_bundled(store: Path) -> None:
    """Train the walltime model on the bundled KTH-SP2 trace into ``store`` (as `harp train` does)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_harp.cli",
            "--log-level",
            "WARNING",
            "train",
            "--source",
            str(BUNDLED_TRACE),
            "--store",
            str(store),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
