"""The guard's heartbeat that cannot be written: the poll's work is done, but the poll is no good one."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from slurm_harp.commands import guard as guard_command
from slurm_harp.guard.loop import Guard, PollReport
from slurm_harp.guard.update_rights import LAPSE_S
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


def scontrol_updates(slurm: FakeSlurm, job: str) -> int:
    return sum(argv[:3] == ("scontrol", "update", f"JobId={job}") for argv in slurm.calls)


def test_a_guard_without_rights_beats_no_more_until_an_update_succeeds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its every `scontrol update` refused (it lost its operator rights): before, the heartbeat stopped
    only while a due job was being refused, and every poll without one refreshed it, so the daemon
    went on shortening jobs that were then killed at their cut."""
    caplog.set_level(logging.INFO, logger="slurm_harp.guard")
    clock = [NOW]
    slurm = FakeSlurm([], refused=["1", "2"])
    guard, registry = make_guard(slurm, tmp_path, clock=lambda: clock[0])

    def poll(after_s: float) -> PollReport | None:
        """Job 1 ran 9 minutes of its 10 (Slurm kills it at 10), job 2 10 s: never due in this test."""
        clock[0] = NOW + after_s
        jobs = [("1", 540 + after_s), ("2", 10 + after_s)]
        slurm.listing = "".join(line(j, "10:00", clock_text(s), DUE) + "\n" for j, s in jobs if s < 600)
        return guard.poll()

    for after_s in range(0, 300, 5):
        report = poll(after_s)
        assert report is not None and not report.good and guard.heartbeat.age() is None
    assert registry.get_sample_value("harp_guard_polls_total", {"result": "ok"}) is None
    # Tried early once a minute from job 1's last refusal (at 55 s, before it was killed at 60 s).
    assert scontrol_updates(slurm, "2") == 4
    assert said(caplog, "every extension failed: heartbeat not refreshed") == 1  # said once
    slurm.refused = set()  # its rights given back
    for after_s in range(300, 360, 5):
        report = poll(after_s)
    assert slurm.updates == [("2", 15)]  # one job extended early, by a step within its own 600 min
    assert report is not None and report.good and guard.heartbeat.alive()
    assert said(caplog, "an scontrol update succeeded again") == 1


def clock_text(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def test_a_failing_spell_with_nothing_to_try_lapses_and_the_next_job_is_tried_early(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One passing failure as the last shortened job ended must not keep the daemon from shortening
    jobs for good on a quiet cluster: no job to try for 10 minutes, the heartbeat is refreshed; the
    next shortened job seen running is extended early, and stops the beat again if refused."""
    clock = [NOW]
    slurm = FakeSlurm([line("1", "10:00", "9:00", DUE)], refused=["1"])
    guard, _ = make_guard(slurm, tmp_path, clock=lambda: clock[0])
    guard.poll()  # refused (slurmctld busy, say), and then the job ended
    slurm.listing = line("9", "1:00:00", "0:10", "(null)") + "\n"  # nothing of harp's runs
    while clock[0] < NOW + LAPSE_S - 5:
        clock[0] += 5
        report = guard.poll()
        assert report is not None and not report.good
    clock[0] += 5
    report = guard.poll()
    assert report is not None and report.good and guard.heartbeat.alive()
    assert said(caplog, "no job to extend for 600 s since every extension failed") == 1
    slurm.listing += line("2", "10:00", "0:10", DUE) + "\n"  # a job shortened since, far from due
    slurm.refused = {"2"}
    clock[0] += 5
    report = guard.poll()
    assert report is not None and not report.good and scontrol_updates(slurm, "2") == 1
    assert said(caplog, "every extension failed: heartbeat not refreshed") == 2
