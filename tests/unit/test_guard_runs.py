"""What makes a job's run for `harp guard`: a limit raised while it waited is its own in the run, and
neither a clock stepping back nor the new submit time a requeued job gets as its epilog ends starts
a new one (guard.lowered_limits, Slurm faked at the subprocess boundary)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.unit.test_guard import SUBMITTED, FakeSlurm, line, make_guard, polled
from tests.unit.test_guard_lowered import EXTEND, TIME_MIN, pending


def test_a_raise_above_t0_while_pending_is_the_job_s_own_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The audit's case: a time_min job asked 600 min; its user raised it to 1000 while it waited
    # (Slurm 22.05 allows up to the partition's MaxTime), and backfill started it cut to 100. The
    # guard stopped extending at the tag's 600: the job was killed 400 min before its user's limit.
    caplog.set_level(logging.INFO)
    slurm, guard = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN)],
        [pending("5", "16:40:00", TIME_MIN)],
        [line("5", "1:40:00", "1:00", TIME_MIN)],
    )
    assert "job 5: started after waiting at 1000 min, above its tag's own 600 min" in caplog.text
    slurm.listing = line("5", "10:00:00", "9:59:00", TIME_MIN) + "\n"  # extended to 600 meanwhile
    report = guard.poll()
    assert report is not None and report.shortened == 1 and slurm.updates == [("5", 640)]  # 40 + 10 h
    guard.close()
    # A restarted guard knows it too: the raise was written at once.
    slurm.listing = line("5", "16:00:00", "15:59:00", TIME_MIN) + "\n"
    make_guard(slurm, tmp_path)[0].poll()
    assert slurm.updates[-1] == ("5", 1000)


def test_a_raise_above_t0_while_pending_outlives_a_crash(tmp_path: Path) -> None:
    # The audit's case: the raise to 1000 was only a higher highest, written within the minute; the
    # guard crashed in that minute, and backfill started the job cut to 100 before the restarted
    # guard's first poll: the start read as after waiting at 600, and the job was stopped there.
    slurm, guard = polled(
        tmp_path, [pending("5", "10:00:00", TIME_MIN)], [pending("5", "16:40:00", TIME_MIN)]
    )
    state = tmp_path / "guard" / "limits.json"  # make_guard's
    left = state.read_bytes()
    del guard  # it crashed: what it had not written is lost (the finalizer writes it; undone below)
    state.write_bytes(left)
    slurm.listing = line("5", "1:40:00", "1:00", TIME_MIN) + "\n"  # started, backfill's cut to 100
    restarted, _ = make_guard(slurm, tmp_path)
    restarted.poll()
    slurm.listing = line("5", "10:00:00", "9:59:00", TIME_MIN) + "\n"  # extended to 600 meanwhile
    restarted.poll()
    assert slurm.updates == [("5", 640)]  # past 600, towards its user's 1000


@pytest.mark.parametrize(
    ("tag", "waits", "extended"),
    [
        (TIME_MIN, ["10:00:00", "16:40:00", "13:20:00"], 800),  # raised to 1000, then lowered to 800
        (TIME_MIN, ["10:00:00", "16:40:00", "5:00:00"], 300),  # raised, then lowered below the tag's
        (EXTEND, ["40:00", "1:40:00"], 600),  # cut to 40, raised to 100 (below its own 600): the tag's
        (EXTEND, ["40:00", "10:00:00", "1:40:00"], 100),  # raised to 600, then lowered to 100 (guard.md)
    ],
    ids=[
        "raised-then-lowered",
        "raised-then-lowered-below-t0",
        "extend-raised-below-t0",
        "extend-stop-at-100",
    ],
)
def test_a_raise_while_pending_then_lowerings_set_the_own_limit(
    tmp_path: Path, tag: str, waits: list[str], extended: int
) -> None:
    waited = [[pending("5", limit, tag)] for limit in waits]
    slurm, guard = polled(tmp_path, *waited, [line("5", "40:00", "1:00", tag)])  # backfill's cut to 40
    slurm.listing = line("5", "40:00", "39:00", tag) + "\n"
    guard.poll()
    assert slurm.updates and max(new for _, new in slurm.updates) <= extended
    slurm.listing = line("5", f"{extended - 1}:00", f"{extended - 2}:00", tag) + "\n"
    guard.poll()
    assert slurm.updates[-1] == ("5", extended)


def test_a_job_raised_to_no_limit_while_pending_is_extended_to_none(tmp_path: Path) -> None:
    slurm, guard = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN)],
        [pending("5", "UNLIMITED", TIME_MIN)],
        [line("5", "1:40:00", "1:00", TIME_MIN)],
    )
    slurm.listing = line("5", "100:40:00", "100:39:00", TIME_MIN) + "\n"  # past every step
    guard.poll()
    assert slurm.calls[-1][-1] == "TimeLimit=UNLIMITED"
    guard.close()  # no limit is no number out of range in the state file: a restarted guard knows it
    slurm.calls.clear()
    make_guard(slurm, tmp_path)[0].poll()
    assert slurm.calls[-1][-1] == "TimeLimit=UNLIMITED"


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


@pytest.mark.parametrize("after", ["waiting", "started", "restarted"])
def test_a_lowering_during_a_requeued_job_s_epilog_outlives_its_new_submit_time(
    tmp_path: Path, after: str
) -> None:
    # The audit's case (Slurm 22.05): requeued, a job counts a restart at once and is listed
    # completing, with its old submit time, while its epilog runs; its user lowers it to 20 min then.
    # The epilog's end gives it a new submit time (batch_requeue_fini): that was a new spell whose
    # highest was the 20, and the guard extended the job to 41, past its user's 20. Listed waiting
    # with it, started within a poll of it, or first seen with it by a restarted guard: the same spell.
    def resubmitted(text: str) -> str:
        return text.replace(SUBMITTED, "2026-11-27T11:00:00")

    slurm, guard = polled(
        tmp_path,
        [line("5", "40:00", "20:00", EXTEND)],  # runs at harp's cut
        [line("5", "40:00", "0:00", EXTEND, state="CG", restarts=1)],  # requeued, its epilog runs
        [line("5", "20:00", "0:00", EXTEND, state="CG", restarts=1)],  # lowered by its user
    )
    if after == "waiting":
        slurm.listing = resubmitted(pending("5", "20:00", EXTEND, restarts=1)) + "\n"
        guard.poll()
    elif after == "restarted":
        guard.close()
        guard, _ = make_guard(slurm, tmp_path)
    for used in ("1:00", "18:30"):  # 90 s left
        slurm.listing = resubmitted(line("5", "20:00", used, EXTEND, restarts=1)) + "\n"
        guard.poll()
    assert slurm.updates == []


def _resubmitted(text: str) -> str:
    """``text`` with another submit time: a job given the id again, or a requeue's epilog ended."""
    return text.replace(SUBMITTED, "2026-11-27T11:00:00")


@pytest.mark.parametrize("mode", [TIME_MIN, EXTEND])
def test_a_job_given_the_id_again_before_any_requeue_is_a_new_job(tmp_path: Path, mode: str) -> None:
    """Another job given id 5 (restart count 0, a new submit time) is not the one its user lowered to
    300: the carry-over of a spell to a new submit time is for a requeued job alone."""
    cut = "10:00:00" if mode == TIME_MIN else "40:00"
    slurm, _ = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN)],
        [pending("5", "5:00:00", TIME_MIN)],
        [_resubmitted(pending("5", cut, mode))],
        [_resubmitted(line("5", "1:40:00" if mode == TIME_MIN else cut, "1:00", mode))],
        [
            _resubmitted(
                line(
                    "5",
                    "5:00:00" if mode == TIME_MIN else cut,
                    "4:59:00" if mode == TIME_MIN else "39:00",
                    mode,
                )
            )
        ],
    )
    assert slurm.updates and slurm.updates[-1][1] > (300 if mode == TIME_MIN else 40)


def test_a_new_submit_time_after_a_run_under_one_restart_count_is_a_new_spell(tmp_path: Path) -> None:
    """The carry-over takes a pending spell alone: one seen running under this restart count and
    lowered to 300 is not carried to a new submit time (not an epilog's end)."""
    slurm, _ = polled(
        tmp_path,
        [line("5", "10:00:00", "1:00", TIME_MIN, restarts=1)],
        [line("5", "5:00:00", "2:00", TIME_MIN, restarts=1)],
        [_resubmitted(pending("5", "10:00:00", TIME_MIN, restarts=1))],
        [_resubmitted(line("5", "1:40:00", "1:00", TIME_MIN, restarts=1))],
        [_resubmitted(line("5", "5:00:00", "4:59:00", TIME_MIN, restarts=1))],
    )
    assert slurm.updates and slurm.updates[-1][1] > 300


def test_a_job_waiting_at_its_own_limit_is_not_written_at_once(tmp_path: Path) -> None:
    """Only a raise above t0 is written at once: every new time_min job waiting at t0, written and
    synced at each poll, was the busy site's slowdown."""
    slurm = FakeSlurm([pending("5", "10:00:00", TIME_MIN)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    slurm.listing = f"{pending('5', '10:00:00', TIME_MIN)}\n{pending('6', '10:00:00', TIME_MIN)}\n"
    guard.poll()
    limits = guard._lowered
    assert limits.changed and not limits.own_limit_changed
