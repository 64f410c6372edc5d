from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import decide_limit
from slurm_harp.evaluation.costs import assess
from slurm_harp.evaluation.frontier import Tunable
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.ours import HarpStrategy
from slurm_harp.evaluation.split import chronological_split
from slurm_harp.evaluation.strategy import Split, Strategy
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.family import FamilyConfig
from slurm_harp.learning.fitting import MethodConfig, Refit
from tests.unit.test_models import records

# Every 15th synthetic job times out whoever runs it: censoring-aware upper quantiles sit at the
# request, so the rule needs margins over the lower ones to cut anything.
FAST = MethodConfig(
    family=FamilyConfig(
        quantiles=(0.5, 0.9, 0.99), compare=("linear",), params=BoosterParams(n_estimators=30, num_leaves=7)
    ),
    ladder_margins=(1.0, 1.5, 2.0),
)


@pytest.fixture(scope="module")
def timeline() -> tuple[list[JobRecord], Split]:
    tl = chronological_split(records(2500, seed=5))
    return tl.jobs, tl.split


def test_fits_the_protocol_and_meets_the_budget_on_validation(
    timeline: tuple[list[JobRecord], Split],
) -> None:
    jobs, split = timeline
    strategy = HarpStrategy(Target.TIME, config=FAST)
    as_protocol: Strategy = strategy  # checked by mypy
    assert isinstance(as_protocol, Tunable)
    with pytest.raises(RuntimeError, match="before fit"):
        strategy.limits(jobs, split.train_end)
    strategy.fit(jobs, split, 0.02)
    limits = strategy.limits(jobs, split.train_end)
    assert limits.shape == (len(jobs) - split.train_end,)
    requested = np.array([j.request.time_limit_minutes for j in jobs[split.train_end :]], dtype=float)
    set_ = ~np.isnan(limits)
    assert set_.any() and np.all(limits[set_] < requested[set_]) and np.all(limits[set_] >= 1)
    cut = split.validation_end - split.train_end
    obs = observe(jobs, Target.TIME)
    figures = assess(obs.take(slice(split.train_end, split.validation_end)), limits[:cut])
    assert figures["newly_killed_pct"] is not None and figures["newly_killed_pct"] <= 2.0
    assert figures["waste_cut_pct"] is not None and figures["waste_cut_pct"] > 30
    knob = strategy.knob()
    assert knob["rungs"] > 0 and knob["penalty"] >= 0
    curve = strategy.pareto(jobs, split.validation_end)
    assert len(curve) > 10 and curve[-1] == (0.0, 0.0) and max(c for _, c in curve) > 30


def test_limits_are_causal(timeline: tuple[list[JobRecord], Split]) -> None:
    """Changing what happened to late jobs changes nothing for the jobs submitted before them."""
    jobs, split = timeline
    strategy = HarpStrategy(Target.TIME, config=FAST)
    strategy.fit(jobs, split, 0.02)
    before = strategy.limits(jobs, split.validation_end)
    cut = len(jobs) - 200
    altered = jobs[:cut] + [replace(j, elapsed_s=j.elapsed_s * 3 + 7) for j in jobs[cut:]]
    after = strategy.limits(altered, split.validation_end)
    head = cut - split.validation_end
    np.testing.assert_array_equal(before[:head], after[:head])


@pytest.mark.parametrize("target", [Target.MEMORY, Target.CPUS])
def test_other_targets(timeline: tuple[list[JobRecord], Split], target: Target) -> None:
    jobs, split = timeline
    strategy = HarpStrategy(target, config=FAST)
    strategy.fit(jobs, split, 0.01)
    limits = strategy.limits(jobs, split.train_end)
    assert limits.shape == (len(jobs) - split.train_end,)


def test_refuses_too_little_data_and_takes_options() -> None:
    tl = chronological_split(records(60))
    with pytest.raises(ValueError, match="training jobs"):
        HarpStrategy(Target.TIME, config=FAST).fit(tl.jobs, tl.split, 0.01)
    strategy = HarpStrategy(Target.TIME, ladder_margins=(1.0, 1.2))
    assert strategy.config.ladder_margins == (1.0, 1.2) and strategy.name == "ours"
    with pytest.raises(TypeError):
        HarpStrategy(Target.TIME, no_such_option=1)


@pytest.mark.parametrize("refit", [Refit.UPDATE, Refit.FULL])
def test_refit_serves_only_the_test_window(timeline: tuple[list[JobRecord], Split], refit: Refit) -> None:
    jobs, split = timeline
    fresh = HarpStrategy(Target.TIME, config=FAST, refit=refit)
    stale = HarpStrategy(Target.TIME, config=FAST, refit="off")
    fresh.fit(jobs, split, 0.02)
    stale.fit(jobs, split, 0.02)
    a, b = fresh.limits(jobs, split.train_end), stale.limits(jobs, split.train_end)
    cut = split.validation_end - split.train_end
    # Validation jobs: the models fitted on training only, refit or not (same calibration too).
    np.testing.assert_array_equal(a[:cut], b[:cut])
    # Test jobs: the refitted models, which saw the validation window.
    assert not np.array_equal(a[cut:], b[cut:], equal_nan=True)


@pytest.mark.parametrize("target", [Target.TIME, Target.MEMORY, Target.CPUS])
@pytest.mark.parametrize("refit", list(Refit))
def test_a_window_served_by_one_model_set_only(
    timeline: tuple[list[JobRecord], Split], target: Target, refit: Refit
) -> None:
    """pareto/limits from the test window's first job: with refit no job is left for the first
    models, without it none for the refitted ones; predicting on no rows must not fail (it did
    for LightGBM's sklearn models: `harp evaluate` lost ours on SDSC-SP2 CPUs)."""
    jobs, split = timeline
    strategy = HarpStrategy(target, config=FAST, refit=refit)
    strategy.fit(jobs, split, 0.01)
    assert strategy.limits(jobs, split.validation_end).shape == (len(jobs) - split.validation_end,)
    assert strategy.limits(jobs, len(jobs)).shape == (0,)
    assert strategy.pareto(jobs, split.validation_end)


def test_evaluate_passes_the_tree_settings_to_ours() -> None:
    """`harp evaluate --trees --learning-rate --refit --ladder-rows` grades ours as `harp train`
    would fit it."""
    from slurm_harp.evaluation import lineup

    options = {
        "trees": 40,
        "learning_rate": 0.2,
        "refit": "update",
        "ladder_rows": 500,
        "calibrate_by": "partition",
    }
    ours = lineup.build("ours", Target.TIME, ours_options=options)
    assert isinstance(ours, HarpStrategy) and ours.refit is Refit.UPDATE
    family = ours.config.family
    assert (family.params.n_estimators, family.params.learning_rate) == (40, 0.2)
    assert family.ladder_max_rows == 500 and ours.config.calibration.by == "partition"
    assert family.censored_rounds == family.start_rounds == family.update_rounds == 10
    default = lineup.build("ours", Target.TIME)
    assert isinstance(default, HarpStrategy) and default.config == MethodConfig()
    assert default.refit is Refit.FULL
    custom = HarpStrategy(Target.TIME, FAST, trees=10)  # only what is given changes
    assert custom.config.family.params == replace(FAST.family.params, n_estimators=10)


def test_risks_per_partition_reach_the_limits_and_the_knob(timeline: tuple[list[JobRecord], Split]) -> None:
    """`--calibrate-by partition`: the partitions with enough validation jobs get risks of their
    own, and each job's limit is the rule's for its partition (as the daemon would set it)."""
    jobs, split = timeline
    named = [replace(j, request=replace(j.request, partition=("a", "b")[i % 2])) for i, j in enumerate(jobs)]
    for i in range(1, len(named), 14):  # every 7th job of "b" runs three times longer, within its request
        j = named[i]
        run = min(3 * j.elapsed_s, 60 * j.request.time_limit_minutes - 60)  # type: ignore[operator]
        named[i] = replace(j, elapsed_s=run, end_time=j.request.submit_time + run)  # type: ignore[operator]
    strategy = HarpStrategy(Target.TIME, config=FAST, calibrate_by="partition")
    strategy.fit(named, split, 0.02)
    assert strategy.fitted is not None
    rule = strategy.fitted.calibration
    assert rule.by == "partition" and set(rule.group_risks) == {"a", "b"}
    assert (
        sum(rb > ra for ra, rb in zip(rule.risks("a"), rule.risks("b"), strict=True)) > len(rule.rungs) // 2
    )
    assert strategy.knob()["partitions"] == 2.0
    _, predictions, td, have = strategy._predictions(named, split.validation_end)
    index = split.validation_end + np.flatnonzero(have)
    limits = strategy.limits(named, split.validation_end)[have]
    differ = 0
    for i, job in enumerate(index):
        request = named[job].request
        one = {name: float(p[i]) for name, p in predictions.items()}
        weight = float(td.weight[i])
        got = decide_limit(one, request.time_limit_minutes, weight, rule, request.partition)
        assert (got is None and np.isnan(limits[i])) or got == limits[i]
        differ += got != decide_limit(one, request.time_limit_minutes, weight, rule)
    assert differ > 0  # the partition's risks changed some decisions
    assert "partitions" not in HarpStrategy(Target.TIME, config=FAST).knob()
