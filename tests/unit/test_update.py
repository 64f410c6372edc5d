"""Bringing published models up to date (learning.family.update_family, learning.fitting.Refit)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from slurm_harp.core.request import Target
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.dataset import build_dataset
from slurm_harp.learning.family import FamilyConfig, Sample, fit_family, update_family
from slurm_harp.learning.fitting import MethodConfig, Refit, fit_and_calibrate, refreshed
from slurm_harp.learning.member import Member
from slurm_harp.learning.targets import target_data
from slurm_harp.learning.trainer import split_rows
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore
from tests.training_helpers import train_walltime
from tests.unit.test_models import records
from tests.unit.test_train import synthetic

FAMILY = FamilyConfig(
    quantiles=(0.5, 0.9),
    compare=("huber", "linear"),
    params=BoosterParams(n_estimators=20, num_leaves=7, min_child_samples=10),
    censored_rounds=5,
    start_rounds=5,
    update_rounds=30,
)


def rows(n: int, shift: float, seed: int) -> Sample:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = 1.5 * x[:, 0] + rng.normal(scale=0.3, size=n) + shift
    return x, y, rng.random(n) < 0.1, np.ones(n)


def leaf_counts(node: dict[str, Any]) -> int:
    """The fewest rows in a leaf of a tree dumped by LightGBM."""
    if "leaf_count" in node:
        return int(node["leaf_count"])
    return min(leaf_counts(node["left_child"]), leaf_counts(node["right_child"]))


def trees(member: object) -> int:
    return int(member.model.num_trees())  # type: ignore[attr-defined]


def test_boosted_members_continue_on_the_new_jobs_and_follow_a_shift() -> None:
    members = fit_family(*rows(1500, 0.0, 1), FAMILY)
    x, y, censored, cost = rows(800, 2.0, 2)  # the newest jobs run e^2 times longer
    updated = update_family(members, x, y, censored, cost, FAMILY)
    old, new = by_name(members), by_name(updated)
    assert list(new) == list(old)
    assert new["linear"] is old["linear"]  # sklearn models cannot be continued: left as they are
    # Quantile models: the quantile trees, then as many censored ones (the new rows hold some).
    assert trees(new["q0.90"]) == trees(old["q0.90"]) + 2 * FAMILY.update_rounds
    assert trees(new["huber"]) == trees(old["huber"]) + FAMILY.update_rounds
    # The quantile trees re-fit their leaves to the new jobs' quantiles: coverage is restored.
    for name, q in (("q0.50", 0.5), ("q0.90", 0.9)):
        before, after = np.mean(y < old[name].predict(x)), np.mean(y < new[name].predict(x))
        assert before < q - 0.25 and abs(after - q) < 0.1, (name, before, after)
    # A custom loss takes bounded gradient steps: Huber follows, more slowly.
    assert np.mean(new["huber"].predict(x) - old["huber"].predict(x)) > 0.1
    # Without censored jobs among them no censored trees are added.
    plain = by_name(update_family(members, x, y, np.zeros(len(y), dtype=bool), cost, FAMILY))
    assert trees(plain["q0.90"]) == trees(old["q0.90"]) + FAMILY.update_rounds
    # Each new quantile tree's leaves hold min_child_samples / (1 - q) of the new jobs (the
    # censored trees after them keep the family's own minimum).
    for name, q in (("q0.50", 0.5), ("q0.90", 0.9)):
        tree_info = new[name].model.dump_model()["tree_info"]
        start = trees(old[name])
        added, censored_trees = (
            tree_info[start : start + FAMILY.update_rounds],
            tree_info[start + FAMILY.update_rounds :],
        )
        least = math.ceil(FAMILY.params.min_child_samples / (1 - q))
        assert min(leaf_counts(t["tree_structure"]) for t in added) >= least
        assert min(leaf_counts(t["tree_structure"]) for t in censored_trees) < least
    # Nothing new: nothing changes.
    assert update_family(members, x[:0], y[:0], censored[:0], cost[:0], FAMILY) == members


def test_refreshed_serves_the_calibrated_choice_with_models_brought_up_to_date() -> None:
    jobs = records(1200)
    data = build_dataset(jobs)
    td = target_data(jobs, data, Target.TIME)
    split = split_rows(data, 0.25)
    config = MethodConfig(family=replace(FAMILY, compare=("huber", "linear", "tree")))
    fitted = fit_and_calibrate(data.x, td, split.train, split.validation, config)
    # A chosen sklearn model is published too; it is fitted again, on every job.
    fitted = replace(fitted, chosen="linear")
    every = np.arange(len(td))
    probe = data.x[split.validation]
    for refit in Refit:
        served = refreshed(fitted, refit, data.x, td, every, split.train, config)
        assert (served.calibration, served.chosen) == (fitted.calibration, fitted.chosen)
        for name in fitted.published:
            same = np.array_equal(served.members[name].predict(probe), fitted.members[name].predict(probe))
            assert same is (refit is Refit.OFF), (refit, name)
        # Members the daemon does not get are never touched.
        unpublished = set(fitted.members) - set(fitted.published)
        assert unpublished and all(served.members[n] is fitted.members[n] for n in unpublished)
    update = refreshed(fitted, Refit.UPDATE, data.x, td, every, split.train, config)
    assert trees(update.members["q0.50"]) > trees(fitted.members["q0.50"])
    full = refreshed(fitted, Refit.FULL, data.x, td, every, split.train, config)
    assert trees(full.members["q0.50"]) <= trees(fitted.members["q0.50"])  # fitted anew, not continued


def test_updated_models_export_and_serve(tmp_path: Path) -> None:
    """`harp train --refit update`: the continued models pass the ONNX parity check and load."""
    result = train_walltime(synthetic(600), (0.5, 0.9), params=FAMILY.params, refit=Refit.UPDATE)
    assert result.card["training"]["refit"] == "update"
    assert result.card["parity_max_abs_error"] < 1e-4
    store = ModelStore(tmp_path)
    store.publish(Target.TIME, result.files, result.card)
    current = store.current_dir(Target.TIME)
    assert current is not None
    model = QuantileModel.load(current)
    served = model.predict(result.window.x[:50])
    assert np.all(np.isfinite(served[0.9])) and np.all(served[0.9] >= served[0.5])


def by_name(members: list[Member]) -> dict[str, Member]:
    return {m.name: m for m in members}
