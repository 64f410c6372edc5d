"""Limits served along a whole trace by fits renewed as nightly retraining renews them."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation.ours import HarpStrategy
from slurm_harp.evaluation.rolling import period_starts, served_limits
from slurm_harp.learning.family import FamilyConfig
from slurm_harp.learning.fitting import MethodConfig

DAY = 86400
FAST = MethodConfig(family=FamilyConfig(quantiles=(0.5, 0.9, 0.99), compare=()))
# Validation windows of 72-215 jobs below: a 5 % budget they can show met (calibration.jobs_needed:
# 60), so the rule rewrites there.
BUDGET = 0.05


def trace(n: int = 1200, seed: int = 3) -> list[JobRecord]:
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        submit = i * 3600
        request = int(rng.choice([60, 120, 240]))
        run = int(request * 60 * rng.uniform(0.05, 0.6))
        jobs.append(
            JobRecord(
                job_id=str(i),
                request=JobRequest(
                    user_name=f"u{i % 7}", job_name=f"app{i % 5}", time_limit_minutes=request, min_cpus=1,
                    submit_time=submit,
                ),
                state="COMPLETED",
                elapsed_s=run,
                start_time=submit,
                end_time=submit + run,
            )
        )  # fmt: skip
    return jobs


def make() -> HarpStrategy:
    return HarpStrategy(Target.TIME, config=FAST)


def test_periods_start_after_the_training_head() -> None:
    jobs = trace(200)
    starts = period_starts(jobs, period_days=2, first_fraction=0.25)
    assert starts[0] == 50 and starts[-1] == 200
    gaps = [
        (jobs[b].request.submit_time or 0) - (jobs[a].request.submit_time or 0)
        for a, b in pairwise(starts[:-1])
    ]
    assert all(g >= 2 * DAY for g in gaps)


def test_head_keeps_requests_and_later_limits_never_exceed_them() -> None:
    jobs = trace()
    served = served_limits(jobs, period_days=10, first_fraction=0.3, make=make, kill_budget=BUDGET)
    head = int(0.3 * len(jobs))
    assert np.isnan(served.rule[:head]).all() and np.isnan(served.quantile[:head]).all()
    assert served.fits == len(period_starts(jobs, 10, 0.3)) - 1
    requested = np.array([j.request.time_limit_minutes for j in jobs], dtype=float)
    tail = slice(head, None)
    assert np.isfinite(served.quantile[tail]).all()
    assert (served.quantile[tail] <= requested[tail]).all()
    finite = np.isfinite(served.rule)
    assert finite[tail].any() and (served.rule[finite] <= requested[finite]).all()


def test_no_limit_sees_a_job_that_ended_after_its_period_began() -> None:
    jobs = trace()
    first = period_starts(jobs, 10, 0.3)
    # Change what the jobs of the last period did: earlier periods' limits must not move.
    cut = first[-2]
    changed = [replace(j, elapsed_s=j.elapsed_s * 3, end_time=(j.request.submit_time or 0) + j.elapsed_s * 3)
               if i >= cut else j for i, j in enumerate(jobs)]  # fmt: skip
    a = served_limits(jobs, period_days=10, first_fraction=0.3, make=make, kill_budget=BUDGET)
    b = served_limits(changed, period_days=10, first_fraction=0.3, make=make, kill_budget=BUDGET)
    np.testing.assert_array_equal(a.quantile[:cut], b.quantile[:cut])
    np.testing.assert_array_equal(a.rule[:cut], b.rule[:cut])


def test_cold_marks_the_jobs_whose_user_had_nothing_ended_as_the_daemon_reads_it() -> None:
    from slurm_harp.core.history import history_matrix, is_cold

    jobs = trace(300)
    # A user back after more than the history horizon is cold again (the horizon is 30 days).
    late = replace(jobs[-1], request=replace(jobs[-1].request, user_name="back", submit_time=400 * DAY))
    first = replace(late, job_id="first", request=replace(late.request, submit_time=300 * DAY))
    first = replace(first, start_time=300 * DAY, end_time=300 * DAY + 60)
    late = replace(late, start_time=400 * DAY, end_time=400 * DAY + 60)
    jobs = [*jobs[:-1], first, late]
    served = served_limits(jobs, period_days=10, first_fraction=0.3, make=make, kill_budget=BUDGET)
    # Each of the seven users' first job, then the returning user's two.
    assert served.cold.tolist() == [i < 7 for i in range(299)] + [True, True]
    assert served.cold.tolist() == [is_cold(row) for row in history_matrix(jobs)]


def test_the_features_are_built_once_for_every_period(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_harp.evaluation import ours
    from slurm_harp.learning.dataset import Dataset, build_dataset

    built: list[int] = []

    def counted(jobs: list[JobRecord]) -> Dataset:
        built.append(len(jobs))
        return build_dataset(jobs)

    monkeypatch.setattr(ours, "build_dataset", counted)
    jobs = trace()
    served = served_limits(jobs, period_days=10, first_fraction=0.3, make=make, kill_budget=BUDGET)
    assert served.fits > 2 and built == [len(jobs)]


def lowered_by_harp(jobs: list[JobRecord]) -> list[JobRecord]:
    """Every other job as a site's job store holds it after harp lowered its limit to 30 minutes in
    rewrite mode: accounting shows 30, the tag the user's own."""
    out = []
    for i, j in enumerate(jobs):
        own = j.request.time_limit_minutes
        if i % 2 and own is not None and j.elapsed_s <= 30 * 60:
            j = replace(j, request=replace(j.request, time_limit_minutes=30),
                        harp_tag=f"harp:rewrite,t!=30,t0={own},v=time@1")  # fmt: skip
        out.append(j)
    return out


def test_the_jobs_harp_lowered_are_learned_from_and_served() -> None:
    """`harp simulate --db` and `harp evaluate --db`: a job harp lowered is a row of ours (it is
    matched to its row by its index, not by identity: the row is a copy with the user's own
    request), so it is learned from and gets a limit, capped at its user's own request."""
    asked = trace()
    jobs = lowered_by_harp(asked)
    tagged = np.array([j.harp_tag is not None for j in jobs])
    assert tagged.sum() > 200
    served = served_limits(jobs, period_days=10, first_fraction=0.3, make=make, kill_budget=BUDGET)
    tail = np.arange(len(jobs)) >= int(0.3 * len(jobs))
    assert np.isfinite(served.quantile[tail]).all()
    own = np.array([j.request.time_limit_minutes for j in asked], dtype=float)
    assert (served.quantile[tail] <= own[tail]).all()
    assert (served.quantile[tail & tagged] > 30).any()  # capped by the user's own, not harp's 30
