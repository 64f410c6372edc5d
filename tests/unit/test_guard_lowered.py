"""A limit lowered while the job runs (by its user, or an admin): `harp guard` never raises it back."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slurm_harp.guard import seen_file
from slurm_harp.guard.lowered_limits import MISSING_POLLS
from tests.unit.test_guard import FakeSlurm, line, make_guard, polled

TIME_MIN = "harp:time_min,t~=40,t0=600,v=x"
EXTEND = "harp:extend,t!=40,t0=600,v=x"


def test_a_limit_the_user_lowered_is_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The audit's case: a time_min job started at its user's 600 min, later lowered by the user to 300.
    caplog.set_level(logging.INFO)
    slurm = FakeSlurm([line("5", "10:00:00", "1:00:00", TIME_MIN)])
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    slurm.listing = line("5", "5:00:00", "4:59:00", TIME_MIN) + "\n"  # one minute before its new limit
    report = guard.poll()
    assert report is not None and report.shortened == 0 and report.due == 0 and slurm.updates == []
    assert registry.get_sample_value("harp_guard_shortened_jobs") == 0
    guard.poll()
    assert caplog.text.count("job 5: limit lowered from 600 to 300 min") == 1  # logged once


def test_an_extended_job_lowered_by_its_user_stays_at_or_below_that(tmp_path: Path) -> None:
    slurm = FakeSlurm([line("6", "40:00", "39:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [("6", 41)]
    # Extended further; lowered by its user to 80 min, then to 75 a minute before; raised by an
    # admin to 90: never raised past the user's lowest.
    for limit, used in (
        ("1:40:00", "50:00"),
        ("1:20:00", "55:00"),
        ("1:15:00", "1:14:00"),
        ("1:30:00", "1:29:00"),
    ):
        slurm.listing = line("6", limit, used, EXTEND) + "\n"
        report = guard.poll()
    assert report is not None and report.shortened == 0 and slurm.updates == [("6", 41)]


def test_a_limit_first_seen_low_is_the_limit_the_job_started_with(tmp_path: Path) -> None:
    # Backfill started this time_min job with 300 min: the guard cannot tell that from a user who
    # lowered it before the job ran, and extends it up to the tag's 600.
    slurm = FakeSlurm([line("5", "5:00:00", "4:59:00", TIME_MIN)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [("5", 340)]


def test_a_new_run_and_a_job_gone_are_seen_afresh(tmp_path: Path) -> None:
    slurm = FakeSlurm([line("7", "1:40:00", "50:00", EXTEND), line("8", "1:40:00", "50:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    # 7 requeued (Slurm counts a restart at every requeue) and started again at its cut limit; 8 left
    # the listing, requeued too, and then came back at its cut limit.
    slurm.listing = line("7", "40:00", "39:00", EXTEND, restarts=1) + "\n"
    guard.poll()
    back = [line("7", "41:00", "39:05", EXTEND, restarts=1), line("8", "40:00", "39:00", EXTEND, restarts=1)]
    slurm.listing = "\n".join(back) + "\n"
    guard.poll()
    # 8 is the closer to its limit; 7, 115 s left, gets the first step that leaves the lead (40 + 5).
    assert slurm.updates == [("7", 41), ("8", 41), ("7", 45)]


def pending(job: str, limit: str, comment: str, restarts: int = 0) -> str:
    return line(job, limit, "0:00", comment, nodes="", state="PD", restarts=restarts)


def test_a_limit_lowered_while_pending_bounds_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    slurm, _ = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN)],
        [pending("5", "5:00:00", TIME_MIN)],  # its user lowers it to 300 min
        [line("5", "4:40:00", "4:39:00", TIME_MIN)],  # backfill starts it at 280 (within time_min)
    )
    assert "job 5: limit lowered from 600 to 300 min while it was pending" in caplog.text
    assert slurm.updates == [("5", 300)]  # extended, but only up to its user's 300


def test_a_start_below_the_pending_limit_is_not_a_lowering(tmp_path: Path) -> None:
    # Backfill starts a time_min job at 100 of its 600 min: Slurm's cut, extended as ever.
    slurm, _ = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN), pending("6", "40:00", EXTEND)],
        [line("5", "1:40:00", "1:39:00", TIME_MIN), line("6", "40:00", "39:00", EXTEND)],
    )
    assert slurm.updates == [("5", 160), ("6", 41)]


@pytest.mark.parametrize(
    ("tag", "limit", "started", "extended"),
    [
        (TIME_MIN, "5:00:00", "4:40:00", 300),  # submitted with the user's 600, lowered to 300
        (EXTEND, "30:00", "30:00", None),  # cut to 40 at submission, lowered to 30: never extended
        (TIME_MIN, "10:00:00", "4:40:00", 340),  # as submitted: a start at 280 is backfill's
    ],
)
def test_a_job_first_seen_pending_below_its_submitted_limit_was_lowered(
    tmp_path: Path, tag: str, limit: str, started: str, extended: int | None
) -> None:
    # Lowered before the guard first saw it (submitted while no guard ran, say), still pending: the
    # tag says what the limit was at submission, and only its user or an admin lowers a pending job's.
    minutes = int(started.split(":")[0]) * 60 + int(started.split(":")[1])
    slurm, _ = polled(tmp_path, [pending("5", limit, tag)], [line("5", started, f"{minutes - 1}:00", tag)])
    assert slurm.updates == ([] if extended is None else [("5", extended)])


def test_a_raise_while_pending_is_the_user_s_own_limit_again(tmp_path: Path) -> None:
    # A user may raise a pending job's limit (up to its partition's MaxTime): the own limit follows.
    def waiting(*limits: str) -> list[str]:
        return [pending(job, limit, TIME_MIN) for job, limit in zip("567", limits, strict=True)]

    # 5 starts at its 450 (its own now: not extended), 6 at a backfill cut of 280 (own 600 again), 7
    # at 450, above the 300 last seen: raised in between, perhaps by its user (own 600 again).
    started = (("7:30:00", "7:29:00"), ("4:40:00", "4:39:00"), ("7:30:00", "7:29:00"))
    slurm, _ = polled(
        tmp_path,
        waiting("10:00:00", "10:00:00", "10:00:00"),
        waiting("5:00:00", "5:00:00", "5:00:00"),  # lowered
        waiting("7:30:00", "10:00:00", "5:00:00"),  # raised again
        [line(job, *times, TIME_MIN) for job, times in zip("567", started, strict=True)],
    )
    assert slurm.updates == [("6", 340), ("7", 600)]


def test_a_job_requeued_unseen_is_seen_afresh_by_its_restart_count(tmp_path: Path) -> None:
    # Seen pending at 600; it ran unseen (cut to 100 by backfill), was requeued and waits again at 100
    # with one restart: not a lowering (a run in between), so it runs to its own 600 again.
    slurm, _ = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN)],
        [pending("5", "1:40:00", TIME_MIN, restarts=1)],
        [line("5", "1:40:00", "1:39:00", TIME_MIN, restarts=1)],
    )
    assert slurm.updates == [("5", 160)]


def test_an_array_task_keeps_what_its_pending_record_was_lowered_to(tmp_path: Path) -> None:
    # Tasks 1 and 2 start (backfill cut 1 to 280); 2 is configuring a poll before it runs.
    started = [line("9_1", "4:40:00", "4:39:00", TIME_MIN), pending("9_[3-4]", "5:00:00", TIME_MIN)]
    slurm, _ = polled(
        tmp_path,
        [pending("9_[1-4]", "10:00:00", TIME_MIN)],
        [pending("9_[1-4]", "5:00:00", TIME_MIN)],  # the array lowered to 300
        [*started, line("9_2", "5:00:00", "0:00", TIME_MIN, state="CF")],
        [*started, line("9_2", "5:00:00", "4:59:00", TIME_MIN)],
    )
    assert set(slurm.updates) == {("9_1", 300)}  # 2 never (the fake keeps 1's limit: asked twice)


@pytest.mark.parametrize(
    ("record", "rest"),
    [
        ("9_[1-99:2]", "9_[3-99:2]"),  # --array=1-99:2: 22.05 prints evenly spaced tasks with a step
        ("9_[1-99:2%4]", "9_[3-99:2%4]"),
        ("9_[1,4,9,16,25,36,49,64,...]", "9_[4,9,16,25,36,49,64,81,...]"),  # cut at SLURM_BITSTR_LEN
        ("9_[1,4,9,16,25,36,49,64...%4]", "9_[4,9,16,25,36,49,64,81...%4]"),
    ],
)
def test_a_stepped_or_cut_pending_record_keeps_its_lowering(tmp_path: Path, record: str, rest: str) -> None:
    """Before, such a record was a bad job id: the lowering to 30 went unseen and task 1 was
    extended past it, up to t0."""
    slurm, guard = polled(
        tmp_path,
        [pending(record, "40:00", EXTEND)],
        [pending(record, "30:00", EXTEND)],  # its user lowers the array to 30 while it waits
        [line("9_1", "30:00", "29:00", EXTEND), pending(rest, "30:00", EXTEND)],  # task 1 runs, 1 min left
    )
    assert slurm.updates == []
    assert list(guard._lowered.seen) == ["9_1", "9_["]


def test_a_lone_stepped_pending_record_does_not_fail_the_poll(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slurm = FakeSlurm([pending("9_[1-99:2]", "40:00", EXTEND)])
    guard, registry = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.good and guard.heartbeat.alive()
    assert registry.get_sample_value("harp_guard_polls_total", {"result": "ok"}) == 1
    assert "skipped" not in caplog.text


def test_a_lowered_limit_outlives_a_stop(tmp_path: Path) -> None:
    # 6's user lowers it to 80 min, stops it (a signal on its way, then stopped), and lets it go on.
    slurm, _ = polled(
        tmp_path,
        [line("6", "1:40:00", "50:00", EXTEND)],
        [line("6", "1:20:00", "51:00", EXTEND)],
        [line("6", "1:20:00", "52:00", EXTEND, state="SI")],
        [line("6", "1:20:00", "1:10:00", EXTEND, state="ST")],
        [line("6", "1:20:00", "1:19:00", EXTEND)],
    )
    assert slurm.updates == []


@pytest.mark.parametrize("waiting", ["CG", "SE"])
def test_a_limit_lowered_as_a_requeued_job_waits_is_its_own(tmp_path: Path, waiting: str) -> None:
    # 5 ran at its user's 600 min and was requeued: pending with the limit it ran with, completing
    # while its epilog runs, or held (special exit). Its user lowers it to 300 min then.
    slurm, _ = polled(
        tmp_path,
        [line("5", "10:00:00", "1:00:00", TIME_MIN)],
        [line("5", "10:00:00", "0:00", TIME_MIN, state="CG", restarts=1)],
        [line("5", "5:00:00", "0:00", TIME_MIN, state=waiting, restarts=1)],
        [pending("5", "5:00:00", TIME_MIN, restarts=1)],
        [line("5", "4:40:00", "4:39:00", TIME_MIN, restarts=1)],  # backfill starts it at 280
    )
    assert slurm.updates == [("5", 300)]


def test_an_ending_job_is_kept_as_seen_and_one_never_seen_is_not_followed(tmp_path: Path) -> None:
    _, guard = polled(
        tmp_path,
        [line("6", "1:40:00", "50:00", EXTEND)],
        [line("6", "1:20:00", "51:00", EXTEND)],  # lowered to 80
        [line("6", "1:20:00", "52:00", EXTEND, state="CG"), line("7", "40:00", "30:00", EXTEND, state="CG")],
    )
    guard.close()
    kept = seen_file.load(tmp_path / "guard" / "limits.json")
    assert list(kept) == ["6"] and not kept["6"].pending and kept["6"].lowered_to == 80


def test_a_lowering_outlives_a_line_that_does_not_read(tmp_path: Path) -> None:
    # Extended to 60, lowered by its user to 45; one poll's line garbled (TimeUsed "12:0O"): before,
    # the job was dropped with its lowering, and the next poll extended it past its user's 45.
    garbled = line("6", "45:00", "12:00", EXTEND).replace("|12:00|", "|12:0O|")
    listings = [[line("6", "1:00:00", "10:00", EXTEND)], [line("6", "45:00", "11:00", EXTEND)], [garbled]]
    due = [line("6", "45:00", "43:30", EXTEND)]  # 90 s left
    slurm, guard = polled(tmp_path, *listings, *[listings[2]] * (2 * MISSING_POLLS), due)
    assert slurm.updates == [] and guard._lowered.seen["6"].lowered_to == 45


def test_a_lowering_outlives_a_few_listings_without_the_job(tmp_path: Path) -> None:
    other = line("7", "1:40:00", "10:00", EXTEND)
    lowered = [[line("6", "1:00:00", "10:00", EXTEND), other], [line("6", "45:00", "11:00", EXTEND), other]]
    due = [line("6", "45:00", "43:30", EXTEND), other]
    slurm, _ = polled(tmp_path, *lowered, *[[other]] * (MISSING_POLLS - 1), due)
    assert slurm.updates == []
    # Missing from MISSING_POLLS listings in a row, it is forgotten: taken for the limit it started with.
    slurm, _ = polled(tmp_path / "2", *lowered, *[[other]] * MISSING_POLLS, due)
    assert slurm.updates == [("6", 55)]  # the first step past the lead: 40 + 15


def test_a_job_listed_twice_is_no_lowering_and_is_never_set_below_either_line(tmp_path: Path) -> None:
    # The same id at 60 and at 40 in one listing: before, the 40 was taken for its user's lowering,
    # kept for good, and the job was stopped at 60 though its own limit is 600.
    first = [line("6", "1:00:00", "10:00", EXTEND)]
    twice = [line("6", "1:00:00", "11:00", EXTEND), line("6", "40:00", "11:00", EXTEND)]
    slurm, guard = polled(tmp_path, first, twice, [line("6", "1:00:00", "58:40", EXTEND)])
    assert slurm.updates == [("6", 70)] and guard._lowered.seen["6"].lowered_to is None
    # Due by the lower line: extended past the higher one (never to 41, which would cut the 60).
    slurm, _ = polled(tmp_path / "2", first, [line("6", "1:00:00", "39:00", EXTEND), twice[1]])
    assert slurm.updates == [("6", 70)]
    # A lowering seen before the duplicate listing still holds; an identical line twice is one job.
    lowered = [line("6", "50:00", "12:00", EXTEND)]
    slurm, _ = polled(
        tmp_path / "3", first, lowered, [*twice, twice[0]], [line("6", "50:00", "48:40", EXTEND)]
    )
    assert slurm.updates == []
    slurm, _ = polled(tmp_path / "4", [line("7", "40:00", "39:00", EXTEND)] * 2)
    assert slurm.updates == [("7", 41)]


def test_a_job_listed_twice_at_and_below_its_own_limit_is_said_not_extended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # No limit is both past the higher line (its own 600) and within its own: nothing to run, but
    # a job that may be stopped at the lower line is said so, not left silent.
    first = [line("6", "1:00:00", "10:00", EXTEND)]
    twice = [line("6", "1:00:00", "59:00", EXTEND), line("6", "10:00:00", "59:00", EXTEND)]
    with caplog.at_level(logging.WARNING):
        slurm, _ = polled(tmp_path, first, twice)
    assert slurm.updates == []
    assert "job 6: listed at 60 and 600 min, not extended past its own 600 min" in caplog.text


@pytest.mark.parametrize("garbled", ["", "N/A", "Unknown", "None"])  # INVALID: over a year (test_guard_jobs)
def test_a_garbled_time_limit_is_no_unlimited_limit_and_no_lowering(tmp_path: Path, garbled: str) -> None:
    # A blank or sentinel TimeLimit was read as "no limit": the highest seen, so that the job's true
    # 40 min next looked like its user's lowering, and the job was never extended (killed at its cut).
    slurm, _ = polled(
        tmp_path,
        [line("6", "40:00", "30:00", EXTEND)],
        [line("6", garbled, "31:00", EXTEND)],
        [line("6", "40:00", "39:00", EXTEND)],  # due: 60 s left
    )
    assert slurm.updates == [("6", 41)]


@pytest.mark.parametrize(
    ("tag", "first", "lowered", "due"),
    [
        (EXTEND, "40:00", "30:00", "29:00"),  # the cut seen pending, lowered to 30 min
        (TIME_MIN, "10:00:00", "5:00:00", "4:59:00"),  # the user's 600 min, lowered to 300
    ],
)
def test_a_restarted_guard_keeps_a_lowering_made_while_the_job_was_pending(
    tmp_path: Path, tag: str, first: str, lowered: str, due: str
) -> None:
    # At its start the job's limit is both the highest seen in this run and its lowering: the file
    # refused such an entry ("lowered only below the highest"), and a restarted guard extended the job
    # past its user's lowering (41 min, 340 min).
    slurm, guard = polled(tmp_path, [pending("5", first, tag)], [pending("5", lowered, tag)])
    slurm.listing = line("5", lowered, "1:00", tag) + "\n"
    guard.poll()  # it starts at its lowered limit
    guard.close()
    slurm.listing = line("5", lowered, due, tag) + "\n"  # a minute before it
    restarted, _ = make_guard(slurm, tmp_path)
    restarted.poll()
    assert slurm.updates == []
