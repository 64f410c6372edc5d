"""The safety rule with its risks per partition (`--calibrate-by partition`, Mondrian style)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import Calibration, Rung, decide_limit, ladder_limits, viable_models
from slurm_harp.learning.calibration import CalibrationConfig, calibrate, frontier
from slurm_harp.learning.limit_outcomes import assess
from slurm_harp.learning.targets import TargetData
from tests.unit.test_calibration import walltime_jobs

RULE = Calibration(
    rungs=(Rung("q0.50", 1.0, 0.2), Rung("q0.90", 1.0, 0.05), Rung("q0.90", 2.0, 0.01)),
    penalty=5000.0,
    floor=10.0,
    target=Target.TIME,
    by="partition",
    group_risks={"debug": (0.5, 0.3, 0.2), "long": (0.01, 0.001, 0.0)},
)
RUNGS = [("q0.50", 1.0), ("q0.90", 1.0), ("q0.90", 2.0)]


@given(
    preds=st.lists(st.one_of(st.floats(0, 5000), st.just(math.nan)), min_size=2, max_size=2),
    request=st.one_of(st.none(), st.floats(-5, 3000)),
    weight=st.floats(0.5, 64),
    group=st.sampled_from(["debug", "long", "other", "", None, "debug,long", "long,other", "long,"]),
)
@settings(max_examples=300, deadline=None)
def test_single_job_and_vector_rules_agree_per_partition(
    preds: list[float], request: float | None, weight: float, group: str | None
) -> None:
    named = {"q0.50": preds[0], "q0.90": preds[1]}
    one = decide_limit(named, request, weight, RULE, group)
    many = ladder_limits(
        {k: np.array([v]) for k, v in named.items()},
        np.array([math.nan if request is None else request]),
        np.array([weight]),
        RULE,
        np.array([group or ""], dtype=object),
    )[0]
    assert (one is None and math.isnan(many)) or one == many
    viable = viable_models(request, weight, RULE, group)
    assert decide_limit({k: named[k] for k in viable}, request, weight, RULE, group) == one


def test_a_partition_is_priced_with_its_own_risks() -> None:
    # One core, request 600: q0.90 saves 570 core-minutes, 2 x q0.90 saves 540; penalty 5000.
    assert decide_limit({"q0.90": 30.0}, 600.0, 1.0, RULE) == 60.0  # 570 - 250 < 540 - 50
    assert decide_limit({"q0.90": 30.0}, 600.0, 1.0, RULE, "other") == 60.0  # no risks of its own
    assert decide_limit({"q0.90": 30.0}, 600.0, 1.0, RULE, "debug") is None  # 540 - 1000 < 0
    assert decide_limit({"q0.90": 30.0}, 600.0, 1.0, RULE, "long") == 30.0  # 570 - 5 > 540 - 0
    assert RULE.risks("debug") == (0.5, 0.3, 0.2) and RULE.risks(None) == (0.2, 0.05, 0.01)
    matrix = RULE.risk_matrix(np.array(["long", "", "x"], dtype=object), 3)
    assert matrix.tolist() == [[0.01, 0.001, 0.0], [0.2, 0.05, 0.01], [0.2, 0.05, 0.01]]


def test_a_job_for_several_partitions_takes_each_rungs_largest_risk_over_them() -> None:
    """``-p debug,long`` (the plugin sends the list): Slurm may run the job in either, so each
    rung's risk is the largest of the partitions' (the window's for one without its own)."""
    assert RULE.risks("debug,long") == RULE.risks("long,debug") == (0.5, 0.3, 0.2)
    assert RULE.risks("long,other") == (0.2, 0.05, 0.01)  # "other": the window's risks
    assert RULE.risks("long,") == RULE.risks("long")
    # Before: the list was no partition, so priced with the window's risks (570 - 250 > 0).
    assert decide_limit({"q0.90": 30.0}, 600.0, 1.0, RULE, "long,debug") is None
    assert viable_models(600.0, 1.0, RULE, "debug,long") == ()  # before: ("q0.90",)
    matrix = RULE.risk_matrix(np.array(["debug,long", "long", "long,x"], dtype=object), 3)
    assert matrix.tolist() == [[0.5, 0.3, 0.2], [0.01, 0.001, 0.0], [0.2, 0.05, 0.01]]


def test_jobs_submitted_to_several_partitions_are_killed_no_more_than_calibrated() -> None:
    """A partition whose model is poor, calibrated on its jobs (accounting records the partition
    each ran in); its jobs then submitted with -p gpu,cpu, as the plugin sends them."""
    rng = np.random.default_rng(3)
    parts = []
    for name, n, sigma in (("gpu", 800, 0.8), ("cpu", 3200, 0.15)):  # gpu: a poor model
        request = rng.choice([60.0, 120.0, 240.0, 480.0], n)
        run = np.maximum(request * rng.beta(0.8, 1.5, n), 1.0)
        parts.append((request, run, run * np.exp(rng.normal(0.0, sigma, n)), np.full(n, name, dtype=object)))
    order = rng.permutation(4000)
    request, run, predicted, group = (np.concatenate([p[i] for p in parts])[order] for i in range(4))
    cores = np.full(4000, 4.0)
    td = walltime_jobs(run, request, cores, group)
    rungs = [("q", m) for m in (1.0, 1.25, 1.5, 2.0, 3.0)]
    rule, _ = calibrate({"q": predicted}, td, rungs, CalibrationConfig(kill_budget=0.01, by="partition"))
    gpu = group == "gpu"
    jobs = td.take(np.flatnonzero(gpu))

    def killed(groups: np.ndarray) -> float:
        limits = ladder_limits({"q": predicted[gpu]}, request[gpu], cores[gpu], rule, groups)
        jobs_of = zip(predicted[gpu], request[gpu], groups, strict=True)
        one = [decide_limit({"q": p}, q, 4.0, rule, g) for p, q, g in jobs_of]
        assert [math.nan if v is None else v for v in one] == pytest.approx(limits.tolist(), nan_ok=True)
        return assess(limits, jobs)[0]

    calibrated = killed(group[gpu])
    # Before: 9.88 % of the gpu jobs newly killed as served, 2.88 % as calibrated.
    assert (
        killed(np.full(int(gpu.sum()), "gpu,cpu", dtype=object))
        <= calibrated
        == pytest.approx(2.88, abs=0.01)
    )


def test_a_card_keeps_its_partitions_and_bad_ones_are_refused() -> None:
    data = RULE.to_dict()
    assert data["by"] == "partition" and data["group_risks"]["debug"] == [0.5, 0.3, 0.2]
    assert Calibration.from_dict(data) == RULE
    plain = Calibration(rungs=RULE.rungs, penalty=1.0, floor=1.0, target=Target.TIME)
    assert "by" not in plain.to_dict()  # such a card reads as before in earlier versions
    assert Calibration.from_dict(plain.to_dict()) == plain
    bad: list[dict[str, object]] = [
        {"by": "user"},
        {"by": "none"},  # risks per group without saying by what
        {"group_risks": {"debug": [0.5, 0.3]}},  # not one per rung
        {"group_risks": {"debug": [0.5, 0.3, 1.5]}},
        {"group_risks": {"debug": [0.5, 0.3, math.nan]}},
        {"group_risks": {"debug": "high"}},
        {"group_risks": ["debug"]},
    ]
    for change in bad:
        with pytest.raises(ValueError, match="bad calibration"):
            Calibration.from_dict({**data, **change})
    with pytest.raises(ValueError, match="calibration by"):
        CalibrationConfig(by="user")


def _two_partitions(n: int, seed: int) -> tuple[TargetData, dict[str, np.ndarray]]:
    """Two partitions whose jobs the models cannot tell apart: the same requests and predictions
    (run 0.1-0.2 of the request, q0.90 = 0.24 of it), but in "burst" one job in ten runs half its
    request or more, in "steady" none does; a few jobs of a third, small partition and some with
    none, like "burst"."""
    rng = np.random.default_rng(seed)
    request = rng.choice([60.0, 240.0, 720.0], n)
    group = rng.choice(np.array(["burst", "steady", "tiny", ""], dtype=object), n, p=[0.45, 0.45, 0.02, 0.08])
    run = request * rng.uniform(0.1, 0.2, n)
    erratic = (group != "steady") & (rng.random(n) < 0.1)
    run[erratic] = request[erratic] * rng.uniform(0.5, 1.0, int(erratic.sum()))
    td = walltime_jobs(run, request, rng.choice([1.0, 8.0, 32.0], n), group)
    preds = {"q0.50": request * 0.2, "q0.90": request * 0.24}
    return td, preds


def test_risks_per_partition_let_the_calm_one_be_cut() -> None:
    td, preds = _two_partitions(6000, seed=1)
    later, later_preds = _two_partitions(6000, seed=2)
    by_part = CalibrationConfig(kill_budget=0.01, floor=1.0, by="partition")
    rule, figures = calibrate(preds, td, RUNGS, by_part)
    # "tiny" has too few jobs for risks of its own, and jobs without a partition never do.
    assert set(rule.group_risks) == {"burst", "steady"} and figures["groups"] == 2.0
    assert all(b > s for b, s in zip(rule.risks("burst"), rule.risks("steady"), strict=True))
    plain, _ = calibrate(preds, td, RUNGS, CalibrationConfig(kill_budget=0.01, floor=1.0))
    assert plain.group_risks == {} and plain.by == "none"

    def scored(r: Calibration) -> tuple[float, float]:
        return assess(ladder_limits(later_preds, later.requested, later.weight, r, later.group), later)

    ours, one_risk = scored(rule), scored(plain)
    # One risk per rung cannot tell the partitions apart, and the budget keeps it off most jobs of
    # both; with a risk per partition the steady one is cut, on a later window too, within budget.
    assert ours[0] <= 1.5 and one_risk[0] <= 1.5 and ours[1] > one_risk[1] + 20
    steady = np.flatnonzero(later.group == "steady")
    limits = ladder_limits(later_preds, later.requested, later.weight, rule, later.group)
    assert np.isfinite(limits[steady]).mean() > 0.8  # all but jobs too small to pay for any risk


@pytest.mark.parametrize("by", ["none", "partition"])
def test_the_frontier_passes_through_the_calibrated_point(by: str) -> None:
    td, preds = _two_partitions(3000, seed=3)
    config = CalibrationConfig(kill_budget=0.02, floor=1.0, by=by)
    rule, figures = calibrate(preds, td, RUNGS, config)
    # The same window and grid: one of the curve's points is the rule's own.
    point = (figures["newly_killed_pct"], figures["waste_cut_pct"])
    assert any(
        k == pytest.approx(point[0]) and c == pytest.approx(point[1]) for k, c in frontier(preds, td, rule)
    )
