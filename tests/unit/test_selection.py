from __future__ import annotations

import numpy as np
import pytest

from slurm_harp.learning.selection import SelectionPolicy, score_table, select

WTM = SelectionPolicy()


def _table(**rows: tuple[float, float]) -> dict[str, dict[str, float]]:
    return {name: {"upp": upp, "ov_mape": ov, "aea": 0.5} for name, (upp, ov) in rows.items()}


def test_wtm_lowest_upp_then_lowest_ov_mape_among_the_tied() -> None:
    table = _table(a=(5.0, 80.0), b=(5.5, 40.0), c=(9.0, 10.0))
    # a and b tie on UPP (within 1 point): the lower OV_MAPE wins.
    assert select(table, WTM) == "b"
    # HARP's bug compared OV_MAPE over the whole table and would pick c, whose UPP is far worse.
    assert min(table, key=lambda n: table[n]["ov_mape"]) == "c"
    # Without a tolerance, the lowest UPP alone decides.
    assert select(table, SelectionPolicy(tolerance=0.0)) == "a"


def test_empty_metrics_never_win_and_bad_policies_fail() -> None:
    table = _table(a=(float("nan"), 1.0), b=(20.0, 500.0))
    assert select(table, WTM) == "b"
    with pytest.raises(ValueError, match="no candidate"):
        select({}, WTM)
    with pytest.raises(ValueError, match="missing"):
        select(table, SelectionPolicy(primary="speed"))


def test_higher_is_better_metrics_and_stable_ties() -> None:
    table = {"x": {"aea": 0.4, "upp": 3.0}, "y": {"aea": 0.7, "upp": 3.0}, "z": {"aea": 0.7, "upp": 3.0}}
    assert select(table, SelectionPolicy(primary="aea", secondary="upp", tolerance=0.0)) == "y"
    assert WTM.as_dict()["name"] == "wtm" and SelectionPolicy(primary="aea").as_dict()["name"] == "custom"


def test_score_table_caps_at_the_request_and_sets_censored_apart() -> None:
    actual = np.array([10.0, 20.0, 30.0, 100.0])
    requested = np.array([60.0, 60.0, 60.0, 100.0])
    censored = np.array([False, False, False, True])
    table = score_table({"high": np.full(4, 500.0), "low": np.full(4, 15.0)}, actual, requested, censored)
    # Capped at the request, "high" is the request: nothing cut, nothing killed.
    assert table["high"]["upp"] == 0 and table["high"]["waste_cut_pct"] == pytest.approx(0.0)
    assert table["low"]["upp"] == pytest.approx(100 * 2 / 3)  # 20 and 30 > 15; the censored job is apart
    assert table["low"]["censored_upp"] == 100 and table["high"]["censored_upp"] == 0
    assert table["low"]["n"] == 3


def test_a_job_that_used_nothing_leaves_the_tie_break_working() -> None:
    """4 % of the CPU jobs used 0 CPU-seconds: every model's OV_MAPE was inf, and among models
    tied on UPP the first in table order won, whatever its over-prediction (audit: zero_use.py)."""
    actual = np.array([0.0, 2.0, 4.0, 8.0])
    requested = np.full(4, 16.0)
    censored = np.zeros(4, dtype=bool)
    wide, tight = actual * 3 + 1, actual * 1.1 + 0.1
    table = score_table({"wide": wide, "tight": tight}, actual, requested, censored)
    assert table["tight"]["ov_mape"] < table["wide"]["ov_mape"] < np.inf
    assert table["wide"]["upp"] == table["tight"]["upp"] == 0
    assert select(table, WTM) == "tight"
