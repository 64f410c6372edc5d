"""advice.survival: run-time distributions, checked against hand-computed values."""

from __future__ import annotations

import pytest

from slurm_harp.advice.survival import PiecewiseSurvival, PointMasses, RiskCurve


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


def test_uniform_run_time() -> None:
    d = PiecewiseSurvival.from_points([], upper=10.0)  # uniform on [0, 10]
    assert d.knots == ((0.0, 1.0), (10.0, 0.0))
    assert d.survival(5) == 0.5 and d.survival(-1) == 1.0 and d.survival(12) == 0.0
    assert d.partial_mean(0, 5) == pytest.approx(0.5 * 2.5)
    assert d.partial_mean(0, 10) == pytest.approx(5.0)  # the mean
    assert d.partial_mean(8, 20) == pytest.approx(0.2 * 9.0)


def test_from_quantiles_is_piecewise_linear_through_one_minus_q() -> None:
    d = PiecewiseSurvival.from_quantiles({0.5: 10.0, 0.9: 30.0}, upper=50.0)
    assert [t for t, _ in d.knots] == [0.0, 10.0, 30.0, 50.0]
    assert [s for _, s in d.knots] == pytest.approx([1.0, 0.5, 0.1, 0.0])
    assert d.survival(20) == pytest.approx(0.3)
    # (0, 10]: mass 0.5 at 5; (10, 30]: 0.4 at 20; (30, 50]: 0.1 at 40.
    assert d.partial_mean(0, 50) == pytest.approx(0.5 * 5 + 0.4 * 20 + 0.1 * 40)


def test_points_are_made_non_increasing_by_raising_risk() -> None:
    # Crossing quantiles: risk 0.2 at 10 but 0.3 at 20. The earlier risk is raised, never the
    # later lowered; a point at t <= 0 is dropped; a repeated t keeps its larger risk.
    d = PiecewiseSurvival.from_points([(20.0, 0.3), (10.0, 0.2), (0.0, 0.5), (20.0, 0.1)], upper=40.0)
    assert d.knots == ((0.0, 1.0), (10.0, 0.3), (20.0, 0.3), (40.0, 0.0))


@pytest.mark.parametrize("point", [(40.0, 0.1), (50.0, 0.0), (10.0, 1.5), (float("nan"), 0.5)])
def test_bad_points_are_refused(point: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="survival point"):
        PiecewiseSurvival.from_points([point], upper=40.0)


def test_knots_must_run_from_one_to_zero() -> None:
    with pytest.raises(ValueError, match="from \\(0, 1\\) to \\(upper, 0\\)"):
        PiecewiseSurvival(((0.0, 1.0), (10.0, 0.1)))
    with pytest.raises(ValueError, match="t must increase and s must not"):
        PiecewiseSurvival(((0.0, 1.0), (10.0, 0.2), (5.0, 0.0)))


def test_a_risk_curve_charges_a_finishing_run_its_whole_interval() -> None:
    d = RiskCurve(lambda t: 1.5 - t / 10)  # clipped: 1 up to t = 5, then linear to 0 at 15
    assert d.survival(0) == 1.0 and d.survival(10) == 0.5 and d.survival(20) == 0.0
    assert d.partial_mean(0, 10) == 10 * 0.5  # the true mean of that half is 7.5 x 0.5: an upper bound
