"""`harp guard`'s loop and signals: SIGHUP reloads, SIGTERM stops it after a last save, and
their handlers take no lock (tests/integration/test_guard_reload.py has the real process)."""

from __future__ import annotations

import argparse
import signal
import socket
from pathlib import Path

import pytest

from slurm_harp.commands import guard as guard_command
from slurm_harp.guard.loop import Guard, PollReport
from tests.unit.test_daemon_start import no_such_host
from tests.unit.test_signal_wait import calls_while_handling, handlers_kept, locking


@pytest.mark.timeout(20)  # a signal that no longer woke the loop would wait the 30 s poll
def test_the_guard_s_signal_handlers_take_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler that took a lock the interrupted main thread held (Event.set()) hung the guard,
    until systemd's SIGKILL lost its clean-stop save."""
    probed: dict[signal.Signals, list[str]] = {}
    closed: list[bool] = []

    def poll(_guard: Guard) -> PollReport | None:  # probes the SIGHUP handler, then the SIGTERM one
        sig = signal.SIGTERM if probed else signal.SIGHUP
        probed[sig] = calls_while_handling(sig)
        return None

    monkeypatch.setattr(Guard, "poll", poll)
    monkeypatch.setattr(Guard, "close", lambda _guard: closed.append(True))
    config = tmp_path / "harp.toml"
    files = f'heartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n'
    config.write_text(f"[guard]\n{files}poll_seconds = 30\nstale_seconds = 60\n")
    with handlers_kept():
        assert guard_command.run(argparse.Namespace(config=str(config), once=False)) == 0
    assert list(probed) == [signal.SIGHUP, signal.SIGTERM] and closed == [True]
    assert {sig: locking(calls) for sig, calls in probed.items()} == {signal.SIGHUP: [], signal.SIGTERM: []}


def test_a_metrics_port_in_use_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """start_http_server's OSError ended `harp guard` in a traceback; it is said as `harp serve`
    says its own server.metrics_port, before the guard is made or polls."""
    monkeypatch.setattr(Guard, "poll", lambda _guard: pytest.fail("polled"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "harp.toml"
        files = f'heartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n'
        config.write_text(f'[guard]\n{files}metrics_port = {port}\nmetrics_address = "127.0.0.1"\n')
        assert guard_command.run(argparse.Namespace(config=str(config), once=False)) == 1
    said = (
        f"not starting: guard.metrics_port: cannot serve metrics on 127.0.0.1:{port}: Address already in use"
    )
    assert said in caplog.text


def test_a_metrics_address_that_does_not_resolve_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The address was at fault, and the line named guard.metrics_port."""
    monkeypatch.setattr(Guard, "poll", lambda _guard: pytest.fail("polled"))
    no_such_host(monkeypatch, "nosuch.example")
    config = tmp_path / "harp.toml"
    files = f'heartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n'
    config.write_text(f'[guard]\n{files}metrics_port = 19818\nmetrics_address = "nosuch.example"\n')
    assert guard_command.run(argparse.Namespace(config=str(config), once=False)) == 1
    said = "not starting: guard.metrics_address: cannot serve metrics on nosuch.example:19818: Name or"
    assert said in caplog.text
