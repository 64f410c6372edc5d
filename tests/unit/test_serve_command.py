"""`harp serve` sets up the process for the submission path before it starts the daemon: a short
switch interval (history polls out of the tail) and the heap settled as the history grows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.commands import serve
from slurm_harp.server import heap
from slurm_harp.server.daemon import DaemonError


@pytest.fixture
def interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_serve_sets_the_switch_interval_and_settles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: None
) -> None:
    made: dict[str, Any] = {}

    class Daemon:  # stands in for server.daemon.Daemon: refuses to start, as a taken socket does
        def __init__(self, settings: object, **options: Any) -> None:
            made.update(options, interval=sys.getswitchinterval())

        def start(self) -> None:
            raise DaemonError("another daemon is serving")

        def stop(self, grace: float | None = None) -> None:
            made["stopped"] = grace

    monkeypatch.setattr(serve, "Daemon", Daemon)
    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "models"}"\n')
    assert serve.run(argparse.Namespace(config=config)) == 1
    assert made == {"settle": heap.settle, "interval": serve.SWITCH_INTERVAL_S, "stopped": 0}
