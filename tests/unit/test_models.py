"""The model family's ONNX exports, the format-2 card and the runtime that serves it."""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from slurm_harp.core.features import FEATURE_NAMES, vectorize
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.safety_rule import decide_limit, decision_weight, ladder_limits
from slurm_harp.learning import booster
from slurm_harp.learning.booster import BoosterParams, ParityError
from slurm_harp.learning.calibration import CalibrationConfig
from slurm_harp.learning.dataset import build_dataset
from slurm_harp.learning.family import FamilyConfig, fit_family, size, spread
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.learning.member import history_members
from slurm_harp.learning.trainer import TrainingError, train_target
from slurm_harp.model.card import INPUT_NAME
from slurm_harp.model.runtime import ModelError, QuantileModel
from slurm_harp.model.store import ModelStore

FAST = BoosterParams(n_estimators=30, num_leaves=7, min_child_samples=10)
# Every 15th synthetic job times out whoever runs it, so censoring-aware upper quantiles sit at
# the request: the rule needs margins over the lower ones to cut anything.
CONFIG = MethodConfig(
    family=FamilyConfig(quantiles=(0.5, 0.9, 0.99), params=FAST, sklearn_max_rows=2000),
    calibration=CalibrationConfig(kill_budget=0.05, floor=1.0),
    ladder_margins=(1.0, 1.5, 2.0),
)


def records(n: int, seed: int = 0) -> list[JobRecord]:
    """Users with their own run time, CPU use and memory; every 15th job times out."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        user = int(rng.integers(0, 6))
        limit = 60 * (user + 1)
        run = int(np.clip(rng.lognormal(np.log(limit * 60 / 5), 0.3), 1, limit * 60))
        censored = i % 15 == 0
        run = limit * 60 if censored else run
        cpus = 2 ** (user % 4)
        submit = 1_700_000_000 + 120 * i
        out.append(
            JobRecord(
                job_id=str(i),
                request=JobRequest(
                    user_name=f"u{user}",
                    job_name=f"app{user % 3}",
                    time_limit_minutes=limit,
                    min_cpus=cpus,
                    mem_per_node_mb=4000,
                    min_nodes=1,
                    submit_time=submit,
                ),
                state="TIMEOUT" if censored else "COMPLETED",
                elapsed_s=run,
                end_time=submit + run,
                max_rss_mb=float(rng.normal(300 * (user + 1), 20)),
                total_cpu_s=run * cpus * float(rng.uniform(0.3, 0.9)),
                alloc_cpus=cpus,
                censored=censored,
            )
        )
    return out


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    recs = records(1500)
    ds = build_dataset(recs)
    return ds.x, np.log1p(ds.elapsed_s), ds.censored


def test_every_member_exports_with_parity(data: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    x, y, censored = data
    config = FamilyConfig(quantiles=(0.5, 0.9), params=FAST)
    members = fit_family(x, y, censored, np.ones(len(y)), config)
    members += history_members(("h30d_name_log_max_s",), FEATURE_NAMES)
    kinds = {m.kind for m in members}
    assert kinds == {"quantile", "huber", "eloss", "linear", "tree", "mlp", "history"}
    for member in members:
        onnx_bytes, error = member.export(x[-300:])
        assert error < 1e-3, member.name
        session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
        got = np.asarray(session.run(None, {INPUT_NAME: x[-50:]})[0], dtype=np.float64).reshape(-1)
        np.testing.assert_allclose(got, member.predict(x[-50:]), atol=1e-3, err_msg=member.name)
    # The custom-loss boosters export as plain regressions (identity link), not as classifiers.
    huber = next(m for m in members if m.name == "huber")
    assert float(np.min(huber.predict(x))) > 1.0  # log1p seconds, not a probability in (0, 1)


def test_parity_failures_are_refused(
    data: tuple[np.ndarray, np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y, censored = data
    member = fit_family(
        x, y, censored, np.ones(len(y)), FamilyConfig(quantiles=(0.9,), compare=(), params=FAST)
    )[0]
    monkeypatch.setattr(booster, "parity_error", lambda model, onnx_model, rows: 0.5)
    with pytest.raises(ParityError, match="differs"):
        member.export(x[-100:])


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], list[JobRecord]]:
    recs = records(1500)
    result = train_target(recs, Target.TIME, CONFIG, source="synthetic")
    store = ModelStore(tmp_path_factory.mktemp("store"))
    store.publish(Target.TIME, result.files, result.card)
    directory = store.current_dir(Target.TIME)
    assert directory is not None
    return directory, result.card, recs


def test_format_2_card_describes_choice_and_rule(
    published: tuple[Path, dict[str, Any], list[JobRecord]],
) -> None:
    directory, card, _ = published
    assert card["format"] == 2 and card["target"] == "time" and card["features"] == list(FEATURE_NAMES)
    names = [m["name"] for m in card["models"]]
    assert {"q0.50", "q0.90", "q0.99"} <= set(names)
    assert [q["quantile"] for q in card["quantiles"]] == [0.5, 0.9, 0.99]
    selection = card["selection"]
    assert selection["window"] == "validation" and selection["policy"]["name"] == "wtm"
    assert selection["chosen"] in names
    assert {"q0.50", "huber", "eloss", "linear", "tree", "mlp"} <= set(selection["table"])
    rule = card["calibration"]
    assert rule["rule"] == "ladder-v1" and rule["rungs"] and rule["kill_budget"] == 0.05
    assert {r["model"] for r in rule["rungs"]} <= set(names)
    assert rule["validation"]["newly_killed_pct"] <= 5.0
    assert card["training"]["censored_train"] > 0
    on_disk = json.loads((directory / "card.json").read_text())
    assert all(isinstance(m["sha256"], str) for m in on_disk["models"])


def test_runtime_serves_the_rule_exactly(published: tuple[Path, dict[str, Any], list[JobRecord]]) -> None:
    directory, card, recs = published
    model = QuantileModel.load(directory)
    assert model.calibration is not None and model.chosen == card["selection"]["chosen"]
    assert model.quantiles == (0.5, 0.9, 0.99)
    tail = recs[-200:]
    x = build_dataset(recs).x[-200:]
    served = model.predict_named(x, model.calibration.models)
    requested = np.array([r.request.time_limit_minutes for r in tail], dtype=np.float64)
    weight = np.array([decision_weight(Target.TIME, r.request) for r in tail])
    many = ladder_limits(served, requested, weight, model.calibration)
    for i in range(0, 200, 7):
        one = decide_limit(
            {k: float(v[i]) for k, v in served.items()}, requested[i], weight[i], model.calibration
        )
        assert (one is None and math.isnan(many[i])) or one == many[i]
    assert np.any(~np.isnan(many))  # it does rewrite something


def test_runtime_refuses_unknown_formats_and_broken_rules(
    published: tuple[Path, dict[str, Any], list[JobRecord]], tmp_path: Path
) -> None:
    directory, _, _ = published
    import shutil

    def damaged(change: Any) -> Path:
        copy = Path(
            shutil.copytree(directory, tmp_path / f"{len(list(tmp_path.iterdir()))}" / directory.name)
        )
        card = json.loads((copy / "card.json").read_text())
        change(card)
        (copy / "card.json").write_text(json.dumps(card))
        return copy

    with pytest.raises(ModelError, match=r"card format 3 is unknown; this daemon reads formats 1, 2"):
        QuantileModel.load(damaged(lambda c: c.__setitem__("format", 3)))
    with pytest.raises(ModelError, match="calibration reads models not in the card"):
        QuantileModel.load(
            damaged(lambda c: c["calibration"]["rungs"].append({"model": "x", "margin": 1, "risk": 0}))
        )
    with pytest.raises(ModelError, match=r"at \$\.calibration\.rule: 'ladder-v1' was expected"):
        QuantileModel.load(damaged(lambda c: c["calibration"].__setitem__("rule", "v9")))
    with pytest.raises(ModelError, match="calibration is for"):
        QuantileModel.load(damaged(lambda c: c["calibration"].__setitem__("target", "memory")))
    with pytest.raises(ModelError, match="repeated model name"):
        QuantileModel.load(damaged(lambda c: c["models"].append(dict(c["models"][0]))))


def test_format_1_cards_still_load(
    published: tuple[Path, dict[str, Any], list[JobRecord]], tmp_path: Path
) -> None:
    import shutil

    directory, _, _ = published
    copy = Path(shutil.copytree(directory, tmp_path / directory.name))
    card = json.loads((copy / "card.json").read_text())
    for key in ("models", "selection", "calibration"):
        del card[key]
    card["format"] = 1
    (copy / "card.json").write_text(json.dumps(card))
    model = QuantileModel.load(copy)
    assert model.calibration is None and model.chosen is None and model.names == ()
    assert model.quantiles == (0.5, 0.9, 0.99)
    card["models"] = [{"name": "x", "file": "q0.50.onnx", "sha256": "0" * 64}]
    (copy / "card.json").write_text(json.dumps(card))
    with pytest.raises(ModelError, match="'models' is a format 2 key"):
        QuantileModel.load(copy)


@pytest.mark.parametrize("target", [Target.MEMORY, Target.CPUS])
def test_other_targets_train_and_load(target: Target, tmp_path: Path) -> None:
    recs = records(900, seed=2)
    config = MethodConfig(
        family=FamilyConfig(quantiles=(0.5, 0.9), compare=("linear",), params=FAST),
        calibration=CalibrationConfig(kill_budget=0.02, floor=1.0),
    )
    result = train_target(recs, target, config)
    assert result.card["transform"] == "log1p" and result.card["target"] == target.value
    store = ModelStore(tmp_path)
    store.publish(target, result.files, result.card)
    directory = store.current_dir(target)
    assert directory is not None
    model = QuantileModel.load(directory)
    out = model.predict(vectorize([recs[-1].request]))
    # Peak memory ~300-1800 MB, effective CPUs 0.3-0.9 x 1..8: the median is in that range.
    low, high = (100.0, 3000.0) if target is Target.MEMORY else (0.1, 8.0)
    assert low < float(out[0.5][0]) < high


def test_too_little_data_is_a_training_error() -> None:
    with pytest.raises(TrainingError, match="not enough jobs"):
        train_target(records(40), Target.TIME, CONFIG)
    unmeasured = [
        JobRecord(r.job_id, r.request, r.state, r.elapsed_s, end_time=r.end_time) for r in records(300)
    ]
    with pytest.raises(TrainingError, match="not enough jobs for memory"):
        train_target(unmeasured, Target.MEMORY, CONFIG)


def test_identical_jobs_train_without_anything_to_split_on() -> None:
    """A fresh cluster's first jobs (the e2e case): all alike, some censored; every feature constant."""
    recs = [
        JobRecord(
            job_id=str(i),
            request=JobRequest(
                user_name="alice", job_name="sleepy", time_limit_minutes=60, submit_time=1000 + i
            ),
            state="TIMEOUT" if i == 3 else "COMPLETED",
            elapsed_s=3600 if i == 3 else 2,
            end_time=1000 + i + 2,
            censored=i == 3,
        )
        for i in range(70)
    ]
    result = train_target(
        recs, Target.TIME, MethodConfig(family=FamilyConfig(quantiles=(0.5, 0.9), params=FAST))
    )
    assert {m["name"] for m in result.card["models"]} >= {"q0.50", "q0.90"}


def test_a_cap_takes_rows_spread_evenly_over_the_window() -> None:
    """A capped fit learns from rows evenly spaced in submit order, the newest included, each once."""
    assert spread(5, 10) == slice(None)
    assert spread(10, 10) == slice(None)
    four, one = spread(10, 4), spread(10, 1)
    assert isinstance(four, np.ndarray) and isinstance(one, np.ndarray)
    assert list(four) == [0, 3, 6, 9]
    assert list(one) == [9]
    picked = np.asarray(spread(800_000, 100_000))
    assert picked.size == size(800_000, 100_000) == 100_000
    assert picked[-1] == 799_999 and np.all(np.diff(picked) >= 7) and np.all(np.diff(picked) <= 9)


def test_large_training_sets_fit_on_rows_from_the_whole_window() -> None:
    """The ladder and the comparison models, capped (ladder_max_rows, compare_max_rows), still see
    the old jobs: here the old half ran 100x longer, and the 0.9 quantile stays with the old half's
    run time, the linear model between the two (the newest rows alone would give the new half's)."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2000, 3)).astype(np.float32)
    long, short = np.log1p(36000.0), np.log1p(360.0)
    y = np.concatenate([np.full(1000, long), np.full(1000, short)])
    config = FamilyConfig(
        quantiles=(0.9,),
        compare=("linear",),
        params=FAST,
        ladder_max_rows=1000,
        compare_max_rows=1000,
        censored_rounds=0,
    )
    members = {m.name: m for m in fit_family(x, y, np.zeros(2000, dtype=bool), np.ones(2000), config)}
    assert np.allclose(members["q0.90"].predict(x[:50]), long, atol=0.05)
    linear = members["linear"].predict(x[:50])  # noise features move each row a little
    assert abs(float(np.mean(linear)) - (long + short) / 2) < 0.2 and np.all(np.abs(linear - short) > 1.5)


def test_with_two_threads_harps_models_fit_beside_the_boosters_to_the_same_models() -> None:
    """With n_jobs > 1 the sklearn models fit on a thread of their own: the family keeps its order
    (ladder, then config.compare's), and those models predict exactly as when fitted in line."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(600, 4)).astype(np.float32)
    y = x[:, 0] + rng.normal(scale=0.2, size=600) + 5.0
    config = FamilyConfig(quantiles=(0.5, 0.9), compare=("linear", "huber", "mlp", "tree"), params=FAST)
    two = replace(config, params=replace(FAST, n_jobs=2))
    args = (x, y, np.zeros(600, dtype=bool), np.ones(600))
    one_thread, two_threads = fit_family(*args, config), fit_family(*args, two)
    names = ["q0.50", "q0.90", "linear", "huber", "mlp", "tree"]
    assert [m.name for m in one_thread] == [m.name for m in two_threads] == names
    for a, b in zip(one_thread, two_threads, strict=True):
        if a.kind in ("linear", "tree", "mlp"):
            assert np.array_equal(a.predict(x), b.predict(x)), a.name


def test_a_capped_ladder_is_logged_and_recorded(caplog: pytest.LogCaptureFixture) -> None:
    """When the training jobs outnumber ladder_rows, the log says how many the ladder learns from,
    and the card records the cap: a site can see what its setting leaves out."""
    capped = replace(CONFIG, family=replace(CONFIG.family, ladder_max_rows=300))
    with caplog.at_level(logging.INFO, logger="slurm_harp.learning.fitting"):
        result = train_target(records(600), Target.TIME, capped)
    said = re.search(r"time: the quantile ladder learns from 300 of (\d+) training jobs, spread", caplog.text)
    assert said is not None and int(said.group(1)) > 300
    assert result.card["training"]["ladder_rows"] == 300
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="slurm_harp.learning.fitting"):
        train_target(records(600), Target.TIME, CONFIG)  # 100 k: no cap on 600 jobs, nothing said
    assert "quantile ladder learns" not in caplog.text
