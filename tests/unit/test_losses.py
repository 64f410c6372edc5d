from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.family import FamilyConfig, fit_family
from slurm_harp.learning.objectives import AsymmetricHuber, CostWeightedPinball, Loss, Pinball

FAST = BoosterParams(n_estimators=60, num_leaves=7, min_child_samples=10)
finite = st.floats(-20, 20, allow_nan=False)


def _numeric_gradient(loss: Loss, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> np.ndarray:
    h = 1e-6
    up = loss.value(pred + h, label, censored)
    down = loss.value(pred - h, label, censored)
    out: np.ndarray = (up - down) / (2 * h)
    return out


LOSSES: list[Loss] = [
    Pinball(0.9),
    Pinball(0.5),
    AsymmetricHuber(),
    CostWeightedPinball(0.8, np.array([1.0, 3.0, 0.5, 10.0])),
]


@pytest.mark.parametrize("loss", LOSSES, ids=lambda x: type(x).__name__)
@given(pred=st.lists(finite, min_size=4, max_size=4), label=st.lists(finite, min_size=4, max_size=4))
@settings(max_examples=60, deadline=None)
def test_gradient_is_the_derivative_of_the_value(loss: Loss, pred: list[float], label: list[float]) -> None:
    p, y = np.array(pred), np.array(label)
    # Kinks (p == y, |p - y| == delta) have no derivative: stay away from them.
    e = p - y
    if np.any(np.abs(e) < 1e-3) or np.any(np.abs(np.abs(e) - 0.5) < 1e-3):
        return
    for censored in (np.zeros(4, dtype=bool), np.array([True, False, True, False])):
        grad, hess = loss.gradients(p, y, censored)
        np.testing.assert_allclose(grad, _numeric_gradient(loss, p, y, censored), atol=1e-4)
        assert np.all(hess > 0)  # bounded Newton steps, even where the loss is flat


@pytest.mark.parametrize("loss", LOSSES, ids=lambda x: type(x).__name__)
def test_censored_rows_cost_nothing_once_the_prediction_reaches_them(loss: Loss) -> None:
    label = np.array([5.0, 5.0, 5.0, 5.0])
    pred = np.array([4.0, 5.5, 9.0, 3.0])
    censored = np.ones(4, dtype=bool)
    value = loss.value(pred, label, censored)
    grad, _ = loss.gradients(pred, label, censored)
    # At or above the observed lower bound: no loss, no pull downwards.
    assert value[1] == value[2] == 0.0 and grad[1] == grad[2] == 0.0
    # Below it: the job surely ran longer, the under-prediction side applies.
    assert value[0] > 0 and value[3] > value[0] and grad[0] < 0 and grad[3] < 0
    uncensored = loss.value(pred, label, np.zeros(4, dtype=bool))
    np.testing.assert_allclose(value[[0, 3]], uncensored[[0, 3]])
    assert uncensored[2] > 0


def test_asymmetry_under_prediction_costs_more() -> None:
    huber = AsymmetricHuber()
    label = np.zeros(2)
    value = huber.value(np.array([-0.3, 0.3]), label, np.zeros(2, dtype=bool))
    assert value[0] == pytest.approx(9 * value[1])  # 0.9 under / 0.1 over
    pinball = Pinball(0.9).value(np.array([-1.0, 1.0]), label, np.zeros(2, dtype=bool))
    assert pinball[0] == pytest.approx(9 * pinball[1])
    eloss = CostWeightedPinball(0.9, np.array([1.0, 3.0]))
    # Same miss, three times the cost: three times the under-prediction penalty (cost mean = 2).
    v = eloss.value(np.array([-1.0, -1.0]), label, np.zeros(2, dtype=bool))
    assert v[1] == pytest.approx(3 * v[0]) and v[0] == pytest.approx(0.9 * 1 / 2)


def _groups(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature 0 tells the group. Group 0 runs ~e^3 and finishes; group 1 always hits its limit,
    which varies between e^2 and e^4: its true run times are unknown, above the limit."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 2, n)
    x = np.column_stack([group, rng.normal(size=n)]).astype(np.float32)
    y = np.where(group == 0, rng.normal(3.0, 0.3, n), rng.uniform(2.0, 4.0, n))
    censored = group == 1
    return x, y, censored


def test_censored_rows_are_kept_and_raise_the_fit() -> None:
    x, y, censored = _groups(3000)
    config = FamilyConfig(quantiles=(0.9,), compare=("huber", "eloss"), params=FAST)
    aware = {m.name: m for m in fit_family(x, y, censored, np.ones(len(y)), config)}
    naive = {m.name: m for m in fit_family(x, y, np.zeros(len(y), dtype=bool), np.ones(len(y)), config)}
    probe = np.array([[1.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    for name in ("q0.90", "huber", "eloss"):
        treated, limit_as_run = aware[name].predict(probe), naive[name].predict(probe)
        # The all-censored group: reading the limit as the run time caps the prediction near the
        # limits' own 0.9 quantile (~3.8); as lower bounds they push it above.
        assert treated[0] > limit_as_run[0] + 0.05, name
        # The uncensored group barely moves.
        assert abs(treated[1] - limit_as_run[1]) < 0.25, name
    assert naive["q0.90"].predict(probe)[0] == pytest.approx(3.8, abs=0.2)
