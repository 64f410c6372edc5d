"""`harp guard` as a real process on SIGHUP (docs/configuration.md): a changed `[guard]` and
`history.db` apply at once, and a bad file is logged while the running configuration keeps polling.

squeue, scontrol, sacctmgr and sinfo are stand-ins on PATH that answer an empty cluster, so every
poll is good and refreshes the heartbeat: the heartbeat file being rewritten is the guard polling.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.accounting import extension_file
from slurm_harp.core.extension import ConditionalRatios
from tests.integration.test_serve_process import StderrLines

TOOLS = ("squeue", "scontrol", "sacctmgr", "sinfo")
WAIT_S = 15.0  # generous: the machine is shared; a poll every second needs far less


def guard_toml(tmp: Path, name: str, poll: float, extra: str = "") -> str:
    """A [guard] of its own heartbeat and state files, ``tmp/name/...``, polling every ``poll`` s."""
    return (
        f'[guard]\nheartbeat = "{tmp / name / "heartbeat"}"\nstate = "{tmp / name / "limits.json"}"\n'
        f"poll_seconds = {poll}\nlead_seconds = {max(120, 2 * poll)}\nstale_seconds = {max(30, 2 * poll)}\n"
        + extra
    )


@contextlib.contextmanager
def guarding(tmp: Path, conf: Path) -> Iterator[tuple[subprocess.Popen[str], StderrLines]]:
    """`harp guard --config conf` over an empty cluster for the block; killed after it if left running."""
    tools = tmp / "bin"
    tools.mkdir()
    for tool in TOOLS:
        (tools / tool).write_text("#!/bin/sh\nexit 0\n")
        (tools / tool).chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_harp.cli", "guard", "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"},
    )
    try:
        yield proc, StderrLines(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def beats(
    heartbeat: Path,
    proc: subprocess.Popen[str],
    count: int,
    *,
    since_start: bool = False,
    timeout: float = WAIT_S,
) -> None:
    """Wait for ``count`` fresh beats of ``heartbeat`` (each writes the time, to the millisecond);
    ``since_start``: a beat before the call counts (a first beat is written within a second of it)."""
    last, deadline = None if since_start else _read(heartbeat), time.monotonic() + timeout
    while count > 0:
        assert proc.poll() is None, f"the guard exited ({proc.returncode})"
        assert time.monotonic() < deadline, f"{heartbeat}: {count} beats short after {timeout:g} s"
        now = _read(heartbeat)
        if now is not None and now != last:
            last, count = now, count - 1
        time.sleep(0.05)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[str], stderr: StderrLines) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT_S) == 0
    stderr.wait_for("stopped")


def test_sighup_applies_a_changed_guard_section_and_history_db_at_once(tmp_path: Path) -> None:
    conf = tmp_path / "harp.toml"
    conf.write_text(guard_toml(tmp_path, "a", poll=30))
    db = tmp_path / "history" / "jobs.sqlite"  # only the file beside it is read
    db.parent.mkdir()
    extension_file.write(extension_file.path_for(db), ConditionalRatios([1.5] * 7), time.time())
    with guarding(tmp_path, conf) as (proc, stderr):
        stderr.wait_for("conditional, but no history.db")
        beats(tmp_path / "a" / "heartbeat", proc, 1, since_start=True)
        port = free_port()
        conf.write_text(
            guard_toml(tmp_path, "b", poll=1, extra=f"metrics_port = {port}\n") + f'[history]\ndb = "{db}"\n'
        )
        seen = len(stderr.lines)
        proc.send_signal(signal.SIGHUP)
        stderr.wait_for("SIGHUP: configuration reloaded", after=seen)
        # Three beats within WAIT_S: a poll every second, where the old poll_seconds gives one in 30 s.
        beats(tmp_path / "b" / "heartbeat", proc, 3)
        stderr.wait_for("extension history: 7 ended jobs", after=seen)  # history.db's file, read
        # The metrics endpoint waits for a restart, and says so.
        stderr.wait_for(
            "guard.metrics_address and guard.metrics_port change only after a restart", after=seen
        )
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=WAIT_S).close()
        stop(proc, stderr)
    assert (tmp_path / "b" / "limits.json").exists()  # the new state file, written as it stopped
    assert "Traceback" not in "".join(stderr.lines)


def bad_files(tmp: Path) -> dict[str, str]:
    """Files the reload must refuse -> what the log says of each. Each names another heartbeat, so
    that a partial reload would show."""
    return {
        guard_toml(
            tmp, "bad", poll=2, extra="heartbeat_path = '/tmp/x'\n"
        ): "guard.heartbeat_path: unknown key",
        guard_toml(tmp, "bad", poll=0.5): "guard.poll_seconds: must be a number of seconds >= 1, got 0.5",
        # A lead (120 s) longer than an extend mode's shortest limit (a floor of 0: one minute).
        guard_toml(
            tmp, "bad", poll=2, extra="[policy]\nmode = 'extend'\n[policy.floor]\ntime_minutes = 0\n"
        ): "guard.lead_seconds: 120 s is longer than the shortest time limit harp sets, 60 s",
        # tomllib recurses per level: a RecursionError, which load() turns into a ConfigError.
        guard_toml(
            tmp, "bad", poll=2, extra="x = " + "[" * 5000 + "]" * 5000 + "\n"
        ): "{conf}: nested too deeply to read",
    }


def test_a_bad_file_on_sighup_is_logged_and_the_running_configuration_keeps_polling(tmp_path: Path) -> None:
    conf = tmp_path / "harp.toml"
    conf.write_text(guard_toml(tmp_path, "good", poll=1))
    heartbeat = tmp_path / "good" / "heartbeat"
    with guarding(tmp_path, conf) as (proc, stderr):
        beats(heartbeat, proc, 1, since_start=True)
        for bad, problem in bad_files(tmp_path).items():
            conf.write_text(bad)
            seen = len(stderr.lines)
            proc.send_signal(signal.SIGHUP)
            line = stderr.wait_for("SIGHUP: keeping the previous configuration", after=seen)
            assert problem.format(conf=conf) in line and str(conf) in line
            beats(heartbeat, proc, 2)  # the old configuration still polls, every second
            assert not (tmp_path / "bad").exists()
            assert not any("configuration reloaded" in x for x in stderr.lines[seen:])
        stop(proc, stderr)
