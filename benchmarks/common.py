"""Shared set-up for the benchmarks: training the bundled model in a separate process, and the
daemon's Predict handler on it without a transport."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import BUNDLED_TRACE

if TYPE_CHECKING:
    from slurm_harp.server.daemon import Daemon
    from slurm_harp.server.service import PredictorService


def train_argv(source: Path, store: Path, *extra: str, db: bool = False) -> list[str]:
    """`harp train` from ``source`` (a job store with ``db``) into ``store`` as a separate process,
    warnings only."""
    cli = [sys.executable, "-m", "slurm_harp.cli", "--log-level", "WARNING", "train"]
    return [*cli, "--db" if db else "--source", str(source), "--store", str(store), *extra]


def train_bundled(store: Path) -> None:
    """Train the walltime model on the bundled KTH-SP2 trace into ``store`` (as `harp train` does)."""
    subprocess.run(
        train_argv(BUNDLED_TRACE, store),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def serving(store: Path) -> tuple[Daemon, PredictorService]:
    """A daemon in rewrite mode on ``store``'s models, and its Predict handler (no transport)."""
    from prometheus_client import CollectorRegistry

    from slurm_harp.config import parse
    from slurm_harp.server.daemon import Daemon
    from slurm_harp.server.service import PredictorService

    daemon = Daemon(
        parse({"store": {"path": str(store)}, "policy": {"mode": "rewrite"}}), CollectorRegistry()
    )
    daemon.reload_models()
    return daemon, PredictorService(daemon.predictor, daemon.metrics)
