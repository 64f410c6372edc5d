"""advice.survival: run-time distributions, checked against hand-computed values."""

from __future__ import annotations

import pytest

from slurm_harp.advice.survival import Empirical, PointMasses


def test_point_masses() -> None:
    d = PointMasses([5.0, 30.0], [0.25, 0.75])
    assert [d.survival(t) for t in (0, 5, 10, 30)] == [1.0, 0.75, 0.75, 0.0]
    assert d.partial_mean(0, 5) == 1.25  # 5 x 0.25: the interval is (low, high]
    assert d.partial_mean(5, 30) == 22.5 and d.partial_mean(30, 60) == 0.0


@pytest.mark.parametrize(
    ("values", "probabilities"), [([], []), ([1.0], [0.5]), ([-1.0], [1.0]), ([1.0, 2.0], [1.5, -0.5])]
)
def test_point_masses_must_be_a_distribution(values: list[float], probabilities: list[float]) -> None:
    with pytest.raises(ValueError, match="point masses"):
        PointMasses(values, probabilities)


def test_empirical_run_times_are_point_masses_of_equal_weight() -> None:
    values = [30.0, 5.0, 30.0, 12.0]
    d, same = Empirical(values), PointMasses(values, [0.25] * 4)
    for t in (0, 5, 10, 12, 30, 40):
        assert d.survival(t) == same.survival(t)
    for low, high in ((0, 5), (5, 30), (0, 40), (12, 12), (30, 5)):
        assert d.partial_mean(low, high) == pytest.approx(same.partial_mean(low, high))
    with pytest.raises(ValueError, match="run times must be finite and >= 0"):
        Empirical([1.0, float("inf")])
