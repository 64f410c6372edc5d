"""Many shortened jobs due at once (a large array cut by one prediction): the guard starts early
enough that its sequential `scontrol update` calls reach each job before its limit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.config import GuardSettings
from slurm_harp.guard import seen_file
from slurm_harp.guard.backlog import FIRST_GUESS_S, RESTORED_CAP_S, UpdateTimer, due_jobs
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.guard.loop import Guard
from slurm_harp.guard.running import SQUEUE_ARGV, RunningJob, parse_running
from slurm_harp.guard.slurm import COMMAND_TIMEOUT_S, TIMED_OUT, Completed

START = 1_800_000_000.0
SUBMITTED = "2026-11-27T10:00:00"


class SlowSlurm:
    """``jobs`` array tasks started at START with ``limit`` minutes of their own ``own``; every
    `scontrol update` takes ``update_s`` of the clock. Records when each job's limit was raised."""

    def __init__(self, jobs: int, limit: int, own: int, update_s: float, early: int = 0) -> None:
        self.now = START
        self.update_s = update_s
        # ``early`` other jobs fall due 10 minutes before the array: updates the guard times.
        self.limits = {f"6_{i}": limit - 10 for i in range(early)}
        self.limits |= {f"7_{i}": limit for i in range(jobs)}
        self.tag = f"harp:extend,t!={limit},t0={own},v=x"
        self.raised_at: dict[str, tuple[float, int]] = {}  # job -> (when first, the limit it had)
        self.late: set[str] = set()  # jobs whose limit was raised only after it had passed

    def clock(self) -> float:
        return self.now

    def __call__(self, argv: Sequence[str]) -> Completed:
        argv = tuple(argv)
        if argv == SQUEUE_ARGV:
            used = _clock_text(self.now - START)
            lines = (
                f"{job}|R|0|{SUBMITTED}|{_clock_text(limit * 60)}|{used}|batch|normal|harp|research|alice|"
                f"(null)|c1|N/A|{self.tag}|"
                for job, limit in self.limits.items()
            )
            return Completed(0, "\n".join(lines) + "\n", "")
        if argv[:2] == ("scontrol", "update"):
            self.now += self.update_s
            job = argv[2].removeprefix("JobId=")
            self.raised_at.setdefault(job, (self.now, self.limits[job]))
            if self.now >= START + self.limits[job] * 60:
                self.late.add(job)
            self.limits[job] = int(argv[3].removeprefix("TimeLimit="))
            return Completed(0, "", "")
        if "reservation" in argv:
            return Completed(0, "No reservations in the system\n", "")
        if "partition" in argv:
            return Completed(0, "PartitionName=batch MaxTime=UNLIMITED State=UP\n", "")
        if argv[0] == "sinfo":
            return Completed(0, "c[1-8]|2|4\n", "")
        if "assoc" in argv:
            return Completed(0, "harp|root||||\n", "")
        return Completed(0, "normal|\n", "")


def _clock_text(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def run(slurm: SlowSlurm, tmp_path: Path, from_s: float, until_s: float) -> Guard:
    """Polls from ``from_s`` to ``until_s`` after the jobs started."""
    settings = GuardSettings(heartbeat=tmp_path / "hb", state=tmp_path / "limits.json")
    guard = Guard(
        settings, slurm, GuardMetrics(CollectorRegistry()), clock=slurm.clock, monotonic=slurm.clock
    )
    slurm.now = START + from_s
    while slurm.now < START + until_s:
        guard.poll()
        slurm.now += settings.poll_seconds  # `harp guard` sleeps a period between polls
    guard.close()
    return guard


def late(slurm: SlowSlurm) -> list[str]:
    """Jobs whose limit was raised only after it had passed, or has passed now."""
    passed = {job for job, limit in slurm.limits.items() if slurm.now >= START + limit * 60}
    return sorted(slurm.late | passed)


@pytest.mark.parametrize(
    ("jobs", "update_s"),
    [(1000, 0.2), (3000, 0.05), (400, 0.5), (2000, 0.3)],
    ids=["1000-at-0.2s", "3000-at-0.05s", "400-at-0.5s", "2000-at-0.3s"],
)
def test_every_job_of_a_large_array_is_extended_before_its_limit(
    tmp_path: Path, jobs: int, update_s: float
) -> None:
    """By a guard that has timed no update yet: with a first guess of 0.2 s, 21 of 400 tasks at 0.5 s
    and 284 of 2,000 at 0.3 s passed their limits."""
    slurm = SlowSlurm(jobs, limit=60, own=600, update_s=update_s)
    run(slurm, tmp_path, from_s=2700, until_s=3660)
    assert late(slurm) == []
    # Early, but by no more than the time to reach the last job at the larger of the guess and the
    # truth (updates and a 5 s poll period per 200), and a poll.
    earliest = min(when for job, (when, _) in slurm.raised_at.items() if job.startswith("7_"))
    backlog = jobs * max(update_s, FIRST_GUESS_S) + (jobs // 200 + 1) * 5
    assert earliest >= START + 3600 - 120 - backlog - 5


def test_a_restarted_guard_goes_on_from_the_update_time_it_measured(tmp_path: Path) -> None:
    """Slower than the first guess, 200 tasks at 2 s an update: a guard that went by the guess let 46
    pass their limits; one that goes on from the time the last guard measured lets none."""
    before = SlowSlurm(0, limit=60, own=600, update_s=2.0, early=3)  # three jobs at 50 min
    run(before, tmp_path, from_s=2880, until_s=2900)  # times their updates, stops, saves its state
    assert json.loads((tmp_path / "limits.json").read_text())["update_seconds"] == 2.0
    slurm = SlowSlurm(200, limit=60, own=600, update_s=2.0)
    run(slurm, tmp_path, from_s=2700, until_s=3660)
    assert late(slurm) == []


@pytest.mark.parametrize(("saved", "start"), [(0.05, FIRST_GUESS_S), (2.0, 2.0), (20.0, RESTORED_CAP_S)])
def test_a_saved_update_time_is_a_guess_between_the_first_and_a_cap(saved: float, start: float) -> None:
    """Trusted as a measure, a time saved by a guard of a quiet slurmctld (0.05 s) let 341 of 400
    tasks pass their limits where slurmctld had slowed to 0.5 s, and one saved while slurmctld hung
    (20 s) had 400 jobs extended towards their own limits in two minutes."""
    timer = UpdateTimer()
    timer.restore(saved)
    assert timer.seconds == start and not timer.measured
    timer.add(0.3)
    timer.end_poll()
    assert timer.seconds == pytest.approx(0.3)  # this guard's first measure replaces it


def test_a_restarted_guard_saved_fast_meets_a_slower_slurmctld_in_time(tmp_path: Path) -> None:
    body = {"format": seen_file.FORMAT, "jobs": {}, "update_seconds": 0.05}
    (tmp_path / "limits.json").write_text(json.dumps(body))
    slurm = SlowSlurm(400, limit=60, own=600, update_s=0.5)
    run(slurm, tmp_path, from_s=2700, until_s=3660)
    assert late(slurm) == []


class HungSlurm(SlowSlurm):
    """Every `scontrol update` is cut off at the timeout and changes nothing."""

    def __call__(self, argv: Sequence[str]) -> Completed:
        if tuple(argv[:2]) == ("scontrol", "update"):
            self.now += COMMAND_TIMEOUT_S + 0.05
            return Completed(TIMED_OUT, "", "scontrol timed out after 20 s")
        return super().__call__(argv)


def test_an_update_cut_off_at_the_timeout_is_no_measure_of_an_update(tmp_path: Path) -> None:
    """Counted, it made the update time over 20 s: saved, the next guard refused it as no time an
    update takes."""
    run(HungSlurm(2, limit=60, own=600, update_s=0), tmp_path, from_s=3500, until_s=3520)
    assert "update_seconds" not in json.loads((tmp_path / "limits.json").read_text())


@pytest.mark.parametrize("saved", [None, "fast", -1, 1e9, True, [0.5]])
def test_a_state_file_without_a_sound_update_time_starts_from_the_guess(
    tmp_path: Path, saved: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A file of the guard before (no update time), or one whose time is not one (logged): its jobs
    read all the same."""
    path = tmp_path / "limits.json"
    body = {"format": seen_file.FORMAT, "jobs": {"7_1": [SUBMITTED, 0, False, 60, 60, 60.0, 50]}}
    path.write_text(json.dumps(body | ({} if saved is None else {"update_seconds": saved})))
    timer = UpdateTimer()
    assert list(seen_file.SeenFile(path, updates=timer).load()) == ["7_1"]
    assert timer.seconds == FIRST_GUESS_S and not timer.measured
    assert ("is no time an update takes, ignored" in caplog.text) == (saved is not None)


def test_a_few_jobs_are_extended_within_the_lead_as_before(tmp_path: Path) -> None:
    slurm = SlowSlurm(3, limit=60, own=600, update_s=0.05)
    run(slurm, tmp_path, from_s=2700, until_s=3660)
    assert late(slurm) == []
    for when, limit in slurm.raised_at.values():
        assert START + limit * 60 - 120 - 10 <= when < START + limit * 60


def test_the_update_time_is_measured_and_followed() -> None:
    timer = UpdateTimer()
    assert timer.seconds == FIRST_GUESS_S
    timer.end_poll()  # no update in the poll: the guess stays
    assert timer.seconds == FIRST_GUESS_S
    for seconds in (0.04, 0.06):
        timer.add(seconds)
    timer.end_poll()  # the first measure replaces the guess
    assert timer.seconds == pytest.approx(0.05)
    timer.add(0.45)
    timer.end_poll()  # a slower slurmctld is followed
    assert timer.seconds == pytest.approx(0.25)


def test_jobs_closer_than_a_due_one_are_due_and_a_few_keep_the_plain_lead() -> None:
    def job(name: str, left_s: float) -> RunningJob:
        (parsed,) = parse_running(
            f"{name}|R|0|{SUBMITTED}|1:00:00|{_clock_text(3600 - left_s)}|b|normal|harp|research|alice|"
            "(null)|c1|N/A|harp:extend,t!=60,t0=600,v=x|"
        )
        return parsed

    few = [job("1", 100), job("2", 119), job("3", 500)]
    assert [(j.job_id, lead) for j, lead in due_jobs(few, 120, 0.2, 200, 5)] == [("1", 120), ("2", 120)]
    # 1,000 jobs at 1 s an update: the last is due 120 s + 999 updates + 4 polls - a poll before its limit.
    many = [job(str(i), 130 + i) for i in range(1000)]
    due = due_jobs(many, 120, 1.0, 200, 5)
    assert len(due) == 1000 and [j.job_id for j, _ in due] == [str(i) for i in range(1000)]
    assert due[-1][1] == pytest.approx(max(120 + 999 + 20 - 5, 130 + 999) + 999 + 20 - 5)
    assert due_jobs([job(str(i), 1200 + i) for i in range(1000)], 120, 1.0, 200, 5) == []
