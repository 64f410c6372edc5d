from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_harp.core.extension import STEPS_MINUTES, Extension, due, extensions_needed, next_limit

LEAD = 120.0


def test_not_due_while_the_job_has_more_than_the_lead_left() -> None:
    assert not due(10, 10 * 60 - LEAD - 1, LEAD)
    assert due(10, 10 * 60 - LEAD, LEAD)
    assert next_limit(10, 10, 60, elapsed_s=60, lead_s=LEAD) is None


def test_steps_are_offsets_from_the_original_prediction() -> None:
    # Prediction 10 min, each time the job is one lead from its limit: 10 + 1, + 5, + 15, + 30.
    limits = [10]
    for _ in range(4):
        ext = next_limit(10, limits[-1], 600, elapsed_s=limits[-1] * 60 - LEAD, lead_s=LEAD)
        assert ext is not None and not ext.capped_by_bound
        limits.append(ext.new_limit)
    assert limits == [10, 11, 15, 25, 40]


def test_never_past_the_request_and_reaching_it_is_said() -> None:
    ext = next_limit(10, 55, 60, elapsed_s=55 * 60 - LEAD, lead_s=LEAD)
    assert ext == Extension(60) and ext.reaches(60)
    assert next_limit(10, 60, 60, elapsed_s=3590, lead_s=LEAD) is None  # at its request: its own limit


def test_a_site_bound_caps_the_extension() -> None:
    assert next_limit(10, 15, 600, 15 * 60 - LEAD, LEAD, bound_minutes=20) == Extension(20, True)
    assert next_limit(10, 15, 600, 15 * 60 - LEAD, LEAD, bound_minutes=30) == Extension(25)
    # No room at all under the bound: the guard is told, nothing changes.
    assert next_limit(10, 10, 600, 10 * 60 - LEAD, LEAD, bound_minutes=10) == Extension(10, True)


def test_a_late_guard_still_leaves_the_lead() -> None:
    # The guard was down and comes back with the job 30 s from its limit: +1 min would leave less
    # than the lead (it needs 11.5 min), so the step is +5.
    assert next_limit(10, 10, 600, elapsed_s=10 * 60 - 30, lead_s=LEAD) == Extension(15)
    # Far past every step: straight to the request.
    assert next_limit(1, 1, 10_000, elapsed_s=7000 * 60, lead_s=LEAD) == Extension(10_000)


def test_extensions_needed_counts_the_guard_s_steps() -> None:
    assert extensions_needed(10, run_s=5 * 60, request_minutes=60, lead_s=LEAD) == (0, 10)
    assert extensions_needed(10, run_s=12 * 60, request_minutes=60, lead_s=LEAD) == (2, 15)
    assert extensions_needed(10, run_s=30 * 60, request_minutes=60, lead_s=LEAD) == (4, 40)
    # A job running past its own request is stopped there, as without harp.
    assert extensions_needed(10, run_s=7200, request_minutes=60, lead_s=LEAD)[1] == 60


@given(
    prediction=st.integers(1, 5000),
    request=st.integers(1, 20000),
    run_s=st.floats(1, 2e6),
    lead=st.floats(30, 600),
)
def test_a_job_that_fits_its_request_is_never_stopped_before_it(
    prediction: int, request: int, run_s: float, lead: float
) -> None:
    count, final = extensions_needed(prediction, run_s, request, lead)
    assert final <= request
    if run_s <= request * 60:
        assert final * 60 >= run_s  # it finishes under the limit it ends up with
    assert count <= len(STEPS_MINUTES) + 1


@given(
    prediction=st.integers(1, 5000),
    limit=st.integers(1, 20000),
    request=st.integers(1, 20000),
    elapsed=st.floats(0, 2e6),
    bound=st.none() | st.integers(1, 20000),
)
def test_next_limit_only_raises_and_respects_request_and_bound(
    prediction: int, limit: int, request: int, elapsed: float, bound: int | None
) -> None:
    ext = next_limit(prediction, limit, request, elapsed, LEAD, bound_minutes=bound)
    if ext is None:
        return
    assert ext.new_limit <= request
    assert ext.new_limit >= limit
    if bound is not None:
        assert ext.new_limit <= max(bound, limit)
    if not ext.capped_by_bound:
        assert ext.new_limit > limit
        assert ext.new_limit * 60 >= min(elapsed + LEAD, request * 60) - 1e-6 or ext.reaches(request)


@pytest.mark.parametrize("steps", [STEPS_MINUTES])
def test_steps_increase(steps: tuple[int, ...]) -> None:
    assert list(steps) == sorted(set(steps))
