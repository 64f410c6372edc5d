"""The causal Tsafrir sweep: a job only ever sees its user's jobs that had ENDED before it was submitted."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.evaluation.recent import recent_mean


def job(user: str | None, submit: int, end: int | None) -> JobRecord:
    return JobRecord(
        job_id=f"{user}-{submit}",
        request=JobRequest(user_name=user, submit_time=submit),
        state="COMPLETED",
        elapsed_s=60,
        end_time=end,
    )


def test_never_sees_a_job_that_ended_after_its_submit() -> None:
    jobs = [
        job("u", 0, end=500),  # still running when the next two are submitted
        job("u", 100, end=150),
        job("u", 200, end=300),
        job("u", 600, end=700),
    ]
    values = np.array([1000.0, 10.0, 20.0, 30.0])
    got = recent_mean(jobs, values)
    assert math.isnan(got[0]) and math.isnan(got[1])
    assert got[2] == 10.0  # only job 1 had ended by t=200
    # At t=600 jobs 0 (ended 500), 1 and 2 have ended; the last two by END time are 2 (300) and 0 (500).
    assert got[3] == pytest.approx((20.0 + 1000.0) / 2)


def test_end_at_submit_time_is_known_as_in_the_history_features() -> None:
    # core.job.ended_by: ended at or before the submit second; one second later is not yet known.
    jobs = [job("u", 0, end=100), job("u", 100, end=200), job("v", 0, end=101), job("v", 100, end=200)]
    got = recent_mean(jobs, np.array([5.0, 6.0, 7.0, 8.0]))
    assert got[1] == 5.0 and math.isnan(got[3])


def test_users_are_separate_and_unknown_values_are_skipped() -> None:
    jobs = [
        job("a", 0, 10),
        job("b", 1, 11),
        job("a", 2, 12),
        job(None, 3, 13),
        job("a", 20, 30),
        job("b", 20, 30),
    ]
    values = np.array([1.0, 100.0, math.nan, 7.0, 0.0, 0.0])
    got = recent_mean(jobs, values)
    assert got[4] == 1.0  # a's NaN job never entered the history
    assert got[5] == 100.0
    assert math.isnan(got[3])  # no user: no history


def test_input_order_does_not_matter() -> None:
    jobs = [job("u", 50, 60), job("u", 0, 10), job("u", 20, 30)]
    got = recent_mean(jobs, np.array([3.0, 1.0, 2.0]))
    assert got[0] == pytest.approx(1.5) and math.isnan(got[1]) and got[2] == 1.0


def _reference(jobs: list[JobRecord], values: np.ndarray, depth: int) -> np.ndarray:
    """O(n^2): for each job, the same user's ended jobs sorted by (end, index), last ``depth``."""
    out = np.full(len(jobs), math.nan)
    for i, a in enumerate(jobs):
        ended = sorted(
            (b.end_time, j)
            for j, b in enumerate(jobs)
            if b.request.user_name == a.request.user_name
            and b.end_time is not None
            and a.request.submit_time is not None
            and b.end_time <= a.request.submit_time
            and math.isfinite(values[j])
        )
        if ended:
            out[i] = float(np.mean([values[j] for _, j in ended[-depth:]]))
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 50), st.integers(1, 30)),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 3),
)
def test_matches_a_brute_force_reference(spec: list[tuple[str, int, int]], depth: int) -> None:
    jobs = [job(user, submit, submit + run) for user, submit, run in spec]
    values = np.arange(len(jobs), dtype=float) * 1.5
    np.testing.assert_allclose(
        recent_mean(jobs, values, depth), _reference(jobs, values, depth), equal_nan=True
    )


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        recent_mean([job("u", 0, 1)], np.array([1.0]), depth=0)
    with pytest.raises(ValueError):
        recent_mean([job("u", 0, 1)], np.array([1.0, 2.0]))
