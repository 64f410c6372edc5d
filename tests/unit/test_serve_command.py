"""`harp serve` sets up the process for the submission path before it starts the daemon: a short
switch interval (history polls out of the tail) and the heap settled as the history grows."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.commands import serve
from slurm_harp.server import heap
from slurm_harp.server.daemon import StuckServer
from slurm_harp.server.socket_path import DaemonError
from tests.unit.test_signal_wait import calls_while_handling, locking


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


def serve_with(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    check_socket: Callable[[list[str]], None],
    reload_error: Exception | None = None,
    exit_code: int = 0,
) -> list[str]:
    """Run `harp serve` with a stand-in daemon until a signal stops it: the chores it was given, in
    order. ``check_socket`` is given them so far, to send signals or fail; a reload raises
    ``reload_error`` if given."""
    calls: list[str] = []

    class Daemon:
        def __init__(self, settings: object, **options: Any) -> None:
            pass

        def start(self) -> None:
            pass

        def check_socket(self) -> None:
            calls.append("check_socket")
            check_socket(calls)

        def poll_memory_defaults(self) -> None:
            pass  # its reading is tested in test_memory_default.py and test_serve_process.py

        def reload(self) -> None:
            calls.append("reload")
            if reload_error is not None:
                raise reload_error

        def stop(self, grace: float | None = None) -> None:
            calls.append("stop")

    monkeypatch.setattr(serve, "Daemon", Daemon)
    monkeypatch.setattr(serve, "SOCKET_CHECK_S", 0.01)
    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "models"}"\n')
    assert serve.run(argparse.Namespace(config=config)) == exit_code
    return calls


def test_an_error_in_the_loops_chores_is_logged_and_the_daemon_serves_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    interval: None,
    handlers: None,
) -> None:
    def check_socket(calls: list[str]) -> None:  # fails once (a group gone), then SIGHUP, then SIGTERM
        if len(calls) == 1:
            raise KeyError("getgrnam(): name not found: 'slurm'")
        os.kill(os.getpid(), signal.SIGHUP if "reload" not in calls else signal.SIGTERM)

    calls = serve_with(tmp_path, monkeypatch, check_socket, reload_error=RuntimeError("a reload's bug"))
    assert calls == ["check_socket", "check_socket", "reload", "check_socket", "stop"]
    assert "check_socket failed; serving on" in caplog.text and "not found: 'slurm'" in caplog.text
    assert "reload failed; serving on" in caplog.text and "a reload's bug" in caplog.text


@pytest.mark.usefixtures("interval", "handlers")
def test_a_removed_socket_whose_server_will_not_stop_ends_serve_with_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Not served on as other chores' errors are: only a new process binds the socket again (a
    restart by systemd's Restart=always); the listeners left are stopped first."""

    def check_socket(_calls: list[str]) -> None:
        raise StuckServer("socket /run/harp.sock was removed, and the server ...: exiting")

    calls = serve_with(tmp_path, monkeypatch, check_socket, exit_code=1)
    assert calls == ["check_socket", "stop"]
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert error.getMessage() == "socket /run/harp.sock was removed, and the server ...: exiting"
    assert error.exc_info is None


def test_serve_s_signal_handlers_take_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: None, handlers: None
) -> None:
    """A handler that took a lock the interrupted main thread held (Event.set()) hung the daemon."""
    probed: dict[signal.Signals, list[str]] = {}

    def check_socket(_calls: list[str]) -> None:  # probes the SIGHUP handler, then the SIGTERM one
        sig = signal.SIGTERM if probed else signal.SIGHUP
        probed[sig] = calls_while_handling(sig)

    serve_with(tmp_path, monkeypatch, check_socket)
    assert list(probed) == [signal.SIGHUP, signal.SIGTERM]
    assert {sig: locking(calls) for sig, calls in probed.items()} == {signal.SIGHUP: [], signal.SIGTERM: []}


def test_a_sigterm_with_a_sighup_stops_serve_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interval: None, handlers: None
) -> None:
    """Both pending at one wake: the stop wins. The SIGHUP's reload cleared the stop before."""

    def check_socket(calls: list[str]) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGHUP)

    assert serve_with(tmp_path, monkeypatch, check_socket) == ["check_socket", "stop"]


def test_an_address_that_cannot_be_bound_exits_1_naming_it_with_no_socket_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, interval: None, handlers: None
) -> None:
    """The real daemon, its TCP port taken: before, grpcio's RuntimeError ended `harp serve` with
    a traceback and left the Unix socket it had bound."""
    sock = tmp_path / "harp.sock"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        config = tmp_path / "harp.toml"
        config.write_text(
            f'[server]\nsocket = "{sock}"\ntcp = "{address}"\n[store]\npath = "{tmp_path / "models"}"\n'
        )
        assert serve.run(argparse.Namespace(config=config)) == 1
    [refusal] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert refusal.getMessage().startswith(f"not starting: server.tcp: cannot listen on {address}")
    assert refusal.exc_info is None and not os.path.lexists(sock)
