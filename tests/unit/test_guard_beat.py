"""The guard's heartbeat that cannot be written: the poll's work is done, but the poll is no good one."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from slurm_harp.commands import guard as guard_command
from slurm_harp.guard.loop import Guard
from tests.unit.test_guard import NOW, FakeSlurm, line, make_guard

DUE = "harp:extend,t!=10,t0=600,v=x"


def test_a_heartbeat_that_cannot_be_written_is_no_good_poll(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A regular file where the heartbeat's directory should be: mkdir fails as on a runtime
    # directory gone, /run full or a path outside the unit's writable directories.
    blocker = tmp_path / "run"
    blocker.write_text("")
    slurm = FakeSlurm([line("1", "10:00", "9:00", DUE)])
    guard, registry = make_guard(slurm, tmp_path, heartbeat=blocker / "heartbeat")

    def polls(result: str) -> float | None:
        return registry.get_sample_value("harp_guard_polls_total", {"result": result})

    def last_success() -> float | None:
        return registry.get_sample_value("harp_guard_last_success_timestamp_seconds")

    with caplog.at_level(logging.INFO, logger="slurm_harp.guard"):
        report = guard.poll()
        assert slurm.updates == [("1", 11)]  # the job is extended all the same
        assert report is not None and not report.good
        # The metrics say what the daemon sees: no good poll (HarpGuardStale fires on them).
        assert polls("failed") == 1 and not polls("ok") and last_success() == 0
        assert said(caplog, "not written") == 1 and str(blocker) in caplog.text
        guard.poll()  # logged once, not at every poll
        assert polls("failed") == 2 and said(caplog, "not written") == 1
        blocker.unlink()
        caplog.clear()
        report = guard.poll()
    assert report is not None and report.good and guard.heartbeat.alive()
    assert polls("ok") == 1 and last_success() == NOW
    assert said(caplog, "written again") == 1


def said(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


def test_guard_once_exits_1_when_the_heartbeat_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "run"
    blocker.write_text("")
    config = tmp_path / "harp.toml"
    files = f'heartbeat = "{blocker / "heartbeat"}"\nstate = "{tmp_path / "limits.json"}"\n'
    config.write_text(f'[guard]\n{files}extension = "steps"\n')
    slurm = FakeSlurm([line("1", "10:00", "9:00", DUE)])
    monkeypatch.setattr(guard_command, "run_command", slurm)
    assert guard_command.run(argparse.Namespace(config=str(config), once=True)) == 1
    assert slurm.updates == [("1", 11)]


def test_a_directory_at_the_heartbeat_leaves_no_temporary_file_and_once_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each beat's temporary file was left when the rename failed: 17,000 `.heartbeat.*` a day
    beside a directory at the heartbeat's path, at the default poll."""
    (tmp_path / "hb").mkdir()
    config = tmp_path / "harp.toml"
    config.write_text(f'[guard]\nheartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n')
    monkeypatch.setattr(guard_command, "run_command", FakeSlurm([line("1", "10:00", "9:00", DUE)]))
    for _ in range(3):
        assert guard_command.run(argparse.Namespace(config=str(config), once=True)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["harp.toml", "hb", "limits.json"]
    assert (
        f"heartbeat {tmp_path / 'hb'} not written ([Errno 21] Is a directory: '{tmp_path / 'hb'}')"
        in caplog.text
    )


def test_an_oserror_out_of_a_once_poll_is_one_line_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before guard.pulse caught a heartbeat's OSError, `harp guard --once` with a directory at the
    heartbeat's path ended in an IsADirectoryError traceback; any other such error is said too."""
    config = tmp_path / "harp.toml"
    config.write_text(f'[guard]\nheartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n')
    closed: list[bool] = []

    def failing(_guard: Guard) -> None:
        raise IsADirectoryError(21, "Is a directory", str(tmp_path / "hb"))

    monkeypatch.setattr(Guard, "poll", failing)
    monkeypatch.setattr(Guard, "close", lambda _guard: closed.append(True))
    assert guard_command.run(argparse.Namespace(config=str(config), once=True)) == 1
    assert f"poll failed: [Errno 21] Is a directory: '{tmp_path / 'hb'}'" in caplog.text and closed == [True]
