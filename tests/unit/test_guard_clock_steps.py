"""The host's wall clock stepping back (a bad NTP source corrected, by hand): the guard's intervals
are measured on a monotonic clock, so it goes on re-reading the site's bounds and saving its state."""

from __future__ import annotations

import json
import time
from pathlib import Path

from slurm_harp.commands.guard import history_of
from slurm_harp.config import HistorySettings, Settings
from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard import seen_file
from tests.unit.test_guard import NOW, FakeSlurm, count, line, make_guard

EXTEND = "harp:extend,t!=40,t0=600,v=x"


class Clocks:
    """A wall clock and a monotonic one, both advanced by ``advance``; ``step_back`` moves the wall
    clock alone."""

    def __init__(self) -> None:
        self.wall, self.mono = NOW, 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds

    def step_back(self, seconds: float) -> None:
        self.wall -= seconds


def test_the_partitions_are_read_again_a_minute_after_the_wall_clock_stepped_back(tmp_path: Path) -> None:
    """Before, nothing was re-read for the hour of the step: a MaxTime lowered meanwhile went unseen
    and the job was extended past it."""
    clocks = Clocks()
    slurm = FakeSlurm([line("1", "40:00", "10:00", EXTEND)])
    guard, registry = make_guard(slurm, tmp_path, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono)
    guard.poll()  # the partitions read: batch has no MaxTime
    clocks.advance(5)
    clocks.step_back(3600)
    guard.poll()
    slurm.partitions = "PartitionName=batch MaxTime=00:40:00 State=UP QoS=N/A\n"  # lowered for a maintenance
    clocks.advance(25 * 60)
    slurm.listing = line("1", "40:00", "38:30", EXTEND) + "\n"  # due
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1


def test_the_state_file_is_saved_a_minute_after_the_wall_clock_stepped_back(tmp_path: Path) -> None:
    """Before, jobs first seen after the step were not written for its hour (a crash lost them)."""
    clocks = Clocks()
    slurm = FakeSlurm([line("1", "40:00", "10:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path, clock=lambda: clocks.wall, monotonic=lambda: clocks.mono)
    guard.poll()  # job 1 written: the first change after a start
    clocks.step_back(3600)
    jobs = ["1"]
    for k in range(1, 14):  # a new job every poll, for over a minute
        clocks.advance(5)
        jobs.append(str(100 + k))
        slurm.listing = "\n".join(line(j, "40:00", "10:00", EXTEND) for j in jobs) + "\n"
        guard.poll()
    assert clocks.mono - 1000.0 >= seen_file.SAVE_INTERVAL_S
    saved = json.loads((tmp_path / "guard" / "limits.json").read_text())["jobs"]
    assert len(saved) >= 12


def test_the_guard_checks_its_extension_history_on_the_monotonic_clock(tmp_path: Path) -> None:
    history = history_of(Settings(history=HistorySettings(db=tmp_path / "jobs.sqlite")))
    assert history._clock is time.monotonic  # on the wall clock, a step back of an hour checked nothing
