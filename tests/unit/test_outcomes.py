"""Accuracy from outcomes: each job's harp tag beside what the job used."""

from __future__ import annotations

import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation.outcomes import Outcome, outcomes, version_for

TIME_V, MEM_V = "20261101T000000.000000Z", "20261102T000000.000000Z"
OWNER = {TIME_V: Target.TIME, MEM_V: Target.MEMORY}.get


def job(tag: str | None, *, state: str = "COMPLETED", minutes: float, partition: str = "batch",
        cpus: int = 4, rss: float | None = None) -> JobRecord:  # fmt: skip
    request = JobRequest(partition=partition, min_cpus=cpus, time_limit_minutes=600)
    return JobRecord("j", request, state, int(minutes * 60), alloc_cpus=cpus, max_rss_mb=rss, harp_tag=tag,
                     censored=state == "TIMEOUT")  # fmt: skip


def test_ratios_underprediction_kills_and_saved_core_seconds() -> None:
    records = [
        job(f"harp:shadow,t=100/q0.9,v={TIME_V}", minutes=50),  # used half of the prediction
        job(f"harp:shadow,t=100/q0.9,v={TIME_V}", minutes=150),  # needed more: under-predicted
        # rewrite to 60 from the user's 600, finished in 30: (600 - 60) min x 4 CPUs saved
        job(f"harp:rewrite,t!=60,t0=600,v={TIME_V}", minutes=30),
        # rewrite to 60, killed at it: harp's kill (and under-predicted)
        job(f"harp:rewrite,t!=60,t0=600,v={TIME_V}", state="TIMEOUT", minutes=61),
        # extend mode, timed out at the user's own limit: not harp's kill
        job(f"harp:extend,t!=60,t0=120,v={TIME_V}", state="TIMEOUT", minutes=120),
        job("backup:ok", minutes=5),  # no harp tag
        job("harp:bogus,x=1", minutes=5),  # unreadable: never counted
        job(f"harp:shadow,t=30,m=2000,v={MEM_V}+{TIME_V}", minutes=15, partition="gpu", rss=1000.0),
    ]
    out = outcomes(records, OWNER)
    batch = out[("time", "batch", TIME_V)]
    assert batch.jobs == 5
    assert batch.underpredicted == 3  # 150 > 100, the kill at 60, the extend job ran to 120 > 60
    assert batch.killed == 1
    assert batch.saved_core_seconds == pytest.approx((600 - 60) * 60 * 4)
    assert batch.ratio_sum == pytest.approx(0.5 + 1.5 + 0.5 + 61 / 60 + 2.0)
    cumulative = dict(batch.cumulative())
    assert (
        cumulative["0.5"] == 2 and cumulative["1"] == 2 and cumulative["1.5"] == 4 and cumulative["+Inf"] == 5
    )
    assert out[("time", "gpu", TIME_V)].jobs == 1
    assert out[("memory", "gpu", MEM_V)].ratio_sum == pytest.approx(0.5)
    assert batch.underpredicted_ratio == pytest.approx(3 / 5)


def test_versions_are_matched_to_their_target_or_unknown() -> None:
    assert version_for(Target.TIME, (MEM_V, TIME_V), OWNER) == TIME_V
    assert version_for(Target.CPUS, (MEM_V, TIME_V), OWNER) == "unknown"
    assert Outcome().underpredicted_ratio == 0.0


def test_a_time_min_job_that_timed_out_before_its_own_limit_is_harps_kill() -> None:
    """time_min mode: harp set time_min to 30 min; Slurm's backfill started the job with its limit cut
    to 30 (accounting shows it), the guard did not extend it, and it timed out there, 90 minutes
    before its user's own 120. Without harp's time_min Slurm could not have cut it: harp's kill. At
    its own limit, or with a time_min the user gave (the plugin then leaves no flag), it is not."""
    records = [
        job(f"harp:time_min,t~=30,t0=120,v={TIME_V}", state="TIMEOUT", minutes=30),
        job(f"harp:time_min,t~=30,t0=120,v={TIME_V}", state="TIMEOUT", minutes=120),
        job(f"harp:time_min,t=30,t0=120,v={TIME_V}", state="TIMEOUT", minutes=30),
        job(f"harp:time_min,t~=30,t0=120,v={TIME_V}", minutes=20),
    ]
    batch = outcomes(records, OWNER)[("time", "batch", TIME_V)]
    assert (batch.jobs, batch.killed) == (4, 1)
    assert batch.underpredicted == 2  # the kill, and the job that ran to its own 120 > 30
    assert batch.saved_core_seconds == 0  # a time_min set takes nothing off the reservation asked


def test_a_job_its_user_lowered_below_harps_limit_is_not_harps_kill() -> None:
    """Extend mode cut 600 to 300; its user lowered it to 120 with `scontrol update` while it ran,
    and it timed out there: neither harp's limit nor backfill's stopped it (the guard too leaves it,
    guard.lowered_limits). Before, every timeout before t0 counted as harp's kill."""
    records = [
        job(f"harp:extend,t!=300,t0=600,v={TIME_V}", state="TIMEOUT", minutes=120),
        job(f"harp:time_min,t~=300,t0=600,v={TIME_V}", state="TIMEOUT", minutes=120),
        job(f"harp:extend,t!=300,t0=600,v={TIME_V}", state="TIMEOUT", minutes=300),
    ]
    batch = outcomes(records, OWNER)[("time", "batch", TIME_V)]
    assert (batch.jobs, batch.killed) == (3, 1)
