"""booster.TrainingSet: rows binned once serve every fit, in any order, as fresh rows would."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_harp.learning.booster import BoosterParams, TrainingSet
from slurm_harp.learning.objectives import Pinball

FAST = BoosterParams(n_estimators=20, num_leaves=7, min_child_samples=10)


def rows(n: int = 2000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan
    y = 2.0 * np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) + rng.normal(size=n)
    return x, y, rng.random(n) < 0.1


def test_a_shared_set_fits_what_fresh_sets_fit() -> None:
    x, y, censored = rows()
    probe = x[:300]
    shared = TrainingSet(x, y, FAST)
    low = shared.quantile(0.5, FAST.n_estimators)
    low_more = shared.continued(low, Pinball(0.5), censored, 10)
    # A plain fit after a continued one: the base scores left on the set must not leak into it.
    high = shared.quantile(0.9, FAST.n_estimators)
    high_more = shared.continued(high, Pinball(0.9), censored, 10)

    fresh_low = TrainingSet(x, y, FAST).quantile(0.5, FAST.n_estimators)
    fresh_high = TrainingSet(x, y, FAST).quantile(0.9, FAST.n_estimators)
    fresh_high_more = TrainingSet(x, y, FAST).continued(fresh_high, Pinball(0.9), censored, 10)
    np.testing.assert_array_equal(low.predict(probe), fresh_low.predict(probe))
    np.testing.assert_array_equal(high.predict(probe), fresh_high.predict(probe))
    np.testing.assert_array_equal(high_more.predict(probe), fresh_high_more.predict(probe))
    # The continued trees did move the model: the comparison above is not vacuous.
    assert not np.array_equal(low_more.predict(probe), low.predict(probe))


def test_no_rounds_returns_the_base() -> None:
    x, y, censored = rows(200)
    shared = TrainingSet(x, y, FAST)
    base = shared.quantile(0.5, 5)
    assert shared.continued(base, Pinball(0.5), censored, 0) is base


def test_a_quantile_fit_on_a_base_keeps_its_trees_and_follows_a_shift() -> None:
    x, y, _ = rows()
    probe = x[:300]
    base = TrainingSet(x, y, FAST).quantile(0.5, FAST.n_estimators)
    shifted = TrainingSet(x, y + 3.0, FAST)
    more = shifted.quantile(0.5, 60, base=base)
    assert more.num_trees() == base.num_trees() + 60
    np.testing.assert_allclose(more.predict(probe, num_iteration=base.num_trees()), base.predict(probe))
    # Each new leaf is re-fit to the new rows' median residual: most of the shift is followed.
    before = float(np.median(y + 3.0 - base.predict(x)))
    after = float(np.median(y + 3.0 - more.predict(x)))
    assert before > 2.5 and abs(after) < 0.3, (before, after)
    # A plain fit on the same set afterwards starts from the labels again, not from the base.
    fresh = TrainingSet(x, y + 3.0, FAST).quantile(0.5, FAST.n_estimators)
    np.testing.assert_array_equal(
        shifted.quantile(0.5, FAST.n_estimators).predict(probe), fresh.predict(probe)
    )


def test_quantiles_side_by_side_are_the_one_thread_fits() -> None:
    x, y, censored = rows()
    alphas = (0.5, 0.9, 0.99)
    one = [TrainingSet(x, y, FAST).quantile(a, FAST.n_estimators).model_to_string() for a in alphas]
    shared = TrainingSet(x, y, replace(FAST, n_jobs=2))
    two = shared.quantiles(alphas, FAST.n_estimators)
    assert [m.model_to_string() for m in two] == one
    # After a continued fit left its scores on the set, the rows are binned again first.
    shared.continued(two[0], Pinball(0.5), censored, 5)
    assert [m.model_to_string() for m in shared.quantiles(alphas, FAST.n_estimators)] == one
    assert [m.model_to_string() for m in TrainingSet(x, y, FAST).quantiles(alphas, FAST.n_estimators)] == one


def test_rows_per_leaf_vary_only_on_a_set_binned_for_it() -> None:
    x, y, _ = rows()
    base = TrainingSet(x, y, FAST).quantile(0.9, 5)
    with pytest.raises(ValueError, match="leaf_rows"):
        TrainingSet(x, y, FAST).quantile(0.9, 5, base=base, leaf_rows=200)
    varying = TrainingSet(x, y, FAST, leaf_rows=True)
    wide = varying.quantile(0.9, 5, base=base, leaf_rows=200)
    narrow = varying.quantile(0.9, 5, base=base)  # fewer rows per leaf after more: still allowed
    assert wide.num_trees() == narrow.num_trees() == 10
