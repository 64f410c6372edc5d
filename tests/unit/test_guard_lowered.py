"""A limit lowered while the job runs (by its user, or an admin): `harp guard` never raises it back."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.unit.test_guard import FakeSlurm, line, make_guard

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
    # 7 requeued and started again at its cut limit (its run time went back); 8 left the listing
    # (pending again) and then came back at its cut limit.
    slurm.listing = line("7", "40:00", "39:00", EXTEND) + "\n"
    guard.poll()
    back = [line("7", "41:00", "39:05", EXTEND), line("8", "40:00", "39:00", EXTEND)]
    slurm.listing = "\n".join(back) + "\n"
    guard.poll()
    # 8 is the closer to its limit; 7, 115 s left, gets the first step that leaves the lead (40 + 5).
    assert slurm.updates == [("7", 41), ("8", 41), ("7", 45)]
