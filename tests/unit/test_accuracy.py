from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_harp.core import accuracy

# Four jobs: two under-predicted (by 50 % and 10 %), one exact, one over by 100 %.
PRED = [5.0, 90.0, 30.0, 40.0]
ACTUAL = [10.0, 100.0, 30.0, 20.0]
REQUEST = [60.0, 120.0, 30.0, 60.0]


def test_upp_and_mapes() -> None:
    assert accuracy.upp(PRED, ACTUAL) == pytest.approx(50.0)
    assert accuracy.up_mape(PRED, ACTUAL) == pytest.approx((50.0 + 10.0) / 2)
    # Over-predicted = not under: the exact job counts, with 0 % error.
    assert accuracy.ov_mape(PRED, ACTUAL) == pytest.approx((0.0 + 100.0) / 2)


def test_a_job_that_used_nothing_has_no_percentage_error() -> None:
    """A job with TotalCPU or MaxRSS 0 (failed at once) divided by zero: OV_MAPE was infinite for
    every model, with a RuntimeWarning, and the selection's tie-break compared inf with inf."""
    with np.errstate(all="raise"):
        assert accuracy.ov_mape([*PRED, 3.0], [*ACTUAL, 0.0]) == pytest.approx((0.0 + 100.0) / 2)
        assert accuracy.up_mape([*PRED, -1.0], [*ACTUAL, 0.0]) == pytest.approx((50.0 + 10.0) / 2)
    assert accuracy.upp([*PRED, 3.0], [*ACTUAL, 0.0]) == pytest.approx(40.0)  # still a job


def test_empty_sets_give_nan() -> None:
    assert math.isnan(accuracy.up_mape([2.0], [1.0]))
    assert math.isnan(accuracy.ov_mape([1.0], [2.0]))
    assert math.isnan(accuracy.upp([], []))
    assert math.isnan(accuracy.aea([], []))


def test_aea() -> None:
    expected = np.mean([5 / 10, 90 / 100, 1.0, 20 / 40])
    assert accuracy.aea(PRED, ACTUAL) == pytest.approx(expected)
    assert accuracy.aea([0.0], [0.0]) == 1.0
    assert accuracy.aea([0.0], [5.0]) == 0.0


def test_newly_killed() -> None:
    # Jobs 0 and 1 would be killed by the prediction although their request let them finish.
    assert accuracy.newly_killed_pct(PRED, ACTUAL, REQUEST) == pytest.approx(50.0)
    # A job that ran past its request was going to be killed anyway: not newly killed.
    assert accuracy.newly_killed_pct([5.0], [70.0], [60.0]) == 0.0


def test_waste_cut() -> None:
    cores = [1.0, 2.0, 4.0, 8.0]
    before = 1 * (60 - 10) + 2 * (120 - 100) + 4 * 0 + 8 * (60 - 20)
    # Limits min(p, q): 5 (killed), 90 (killed), 30 (exact), 40 -> only job 3 wastes 8 * 20.
    after = 8 * (40 - 20)
    assert accuracy.waste_cut_pct(PRED, ACTUAL, REQUEST, cores) == pytest.approx(100 * (1 - after / before))
    # Predictions above the request change nothing: the request stays the limit.
    assert accuracy.waste_cut_pct([500.0], [10.0], [60.0]) == pytest.approx(0.0)
    assert math.isnan(accuracy.waste_cut_pct([1.0], [10.0], [10.0]))  # no waste to cut


def test_summary_and_shapes() -> None:
    out = accuracy.summary(PRED, ACTUAL, REQUEST)
    assert out["n"] == 4 and out["upp"] == pytest.approx(50.0)
    assert set(out) >= {"upp", "up_mape", "ov_mape", "aea", "newly_killed_pct", "waste_cut_pct"}
    assert "waste_cut_pct" not in accuracy.summary(PRED, ACTUAL)
    assert "upp=50" in accuracy.format_summary(out)
    with pytest.raises(ValueError, match="shape"):
        accuracy.upp([1.0, 2.0], [1.0])


def test_the_cut_of_nothing_is_nan_in_every_layer() -> None:
    """One cut for training, `harp evaluate` and the advice replay: they answered 0.0, NaN and None
    where there was nothing to cut."""
    from slurm_harp.evaluation import advice_replay

    assert accuracy.cut_pct(200.0, 50.0) == pytest.approx(75.0)
    assert accuracy.cut_pct(200.0, 260.0) == pytest.approx(-30.0)  # a strategy that wastes more
    assert math.isnan(accuracy.cut_pct(0.0, 0.0)) and math.isnan(accuracy.cut_pct(0.0, 5.0))
    assert advice_replay._cut(0.0, 0.0) is None  # its figures' "none"; null in its JSON
