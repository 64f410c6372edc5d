"""`harp serve` sets up the process for the submission path before it starts the daemon: a short
switch interval (history polls out of the tail) and the heap settled as the history grows."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.commands import serve
from slurm_harp.server import heap
from slurm_harp.server.socket_path import DaemonError


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


@pytest.fixture
def handlers() -> Iterator[None]:
    """serve.run installs its signal handlers in this process: put pytest's back after."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_an_error_in_the_loops_chores_is_logged_and_the_daemon_serves_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    interval: None,
    handlers: None,
) -> None:
    calls: list[str] = []

    class Daemon:  # check_socket fails once (a group gone), then SIGHUP's reload fails, then SIGTERM
        def __init__(self, settings: object, **options: Any) -> None:
            pass

        def start(self) -> None:
            pass

        def check_socket(self) -> None:
            calls.append("check_socket")
            if len(calls) == 1:
                raise KeyError("getgrnam(): name not found: 'slurm'")
            os.kill(os.getpid(), signal.SIGHUP if "reload" not in calls else signal.SIGTERM)

        def reload(self) -> None:
            calls.append("reload")
            raise RuntimeError("a reload's bug")

        def stop(self, grace: float | None = None) -> None:
            calls.append("stop")

    monkeypatch.setattr(serve, "Daemon", Daemon)
    monkeypatch.setattr(serve, "SOCKET_CHECK_S", 0.01)
    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "models"}"\n')
    assert serve.run(argparse.Namespace(config=config)) == 0
    assert calls == ["check_socket", "check_socket", "reload", "check_socket", "stop"]
    assert "check_socket failed; serving on" in caplog.text and "not found: 'slurm'" in caplog.text
    assert "reload failed; serving on" in caplog.text and "a reload's bug" in caplog.text
