"""What makes a job's run for `harp guard`: a clock stepping back starts no new run
(guard.lowered_limits, Slurm faked at the subprocess boundary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_guard import line, polled
from tests.unit.test_guard_lowered import EXTEND, TIME_MIN


def test_a_clock_stepping_back_keeps_a_lowering(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The audit's case: running at its user's 600 min, lowered to 300, then the controller's clock
    # steps back 2 s (NTP): squeue's run times go back. That was taken for a new run, the lowering was
    # forgotten, and the job extended to 340. Slurm counts a restart at every requeue (job_mgr.c).
    slurm, guard = polled(
        tmp_path,
        [line("5", "10:00:00", "1:00:00", TIME_MIN), line("6", "40:00", "10:00", EXTEND)],
        [line("5", "5:00:00", "1:00:05", TIME_MIN), line("6", "40:00", "10:05", EXTEND)],
        [line("5", "5:00:00", "1:00:03", TIME_MIN), line("6", "40:00", "10:03", EXTEND)],
    )
    assert "2 jobs' run times went back by more than 1 s" in caplog.text
    slurm.listing = line("5", "5:00:00", "4:59:00", TIME_MIN) + "\n"  # a minute before its 300
    guard.poll()
    assert slurm.updates == []
    # A requeue is a new run: its restart count tells it, and the lowering was that run's.
    slurm.listing = line("5", "1:40:00", "1:39:00", TIME_MIN, restarts=1) + "\n"
    guard.poll()
    assert slurm.updates == [("5", 160)]
