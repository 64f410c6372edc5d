"""The calibrated ladder merged into one ONNX graph answers exactly as its models one by one."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.model import ladder
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore


def _model(store: Path) -> QuantileModel:
    directory = ModelStore(store).current_dir(Target.TIME)
    assert directory is not None
    return QuantileModel.load(directory)


def _rows(n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(7)
    x = rng.normal(2.0, 2.0, size=(n, len(FEATURE_NAMES))).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = np.nan  # missing values take the trees' default branches
    return x


def test_the_merged_ladder_answers_exactly_as_the_models_one_by_one(trained_store: Path) -> None:
    model = _model(trained_store)
    assert model._ladder is not None and set(model._ladder.names) == set(model.names)
    x = _rows()
    merged = model._ladder.run("features", x)
    stacked = model._ladder.run_stacked("features", x)
    assert stacked.shape == (len(model.names), len(x))
    for name in model.names:
        assert np.array_equal(merged[name], model._raw(name, x), equal_nan=True), name
        own = model._raw(name, x).reshape(-1).astype(np.float64)
        assert np.array_equal(stacked[model._ladder.index[name]], own, equal_nan=True), name
    # The serving path uses it from MIN_MODELS models on, and gives what each model gives alone.
    many = model.names[: ladder.MIN_MODELS]
    together = model.predict_named(x[:5], many)
    assert list(together) == list(many)
    for name in many:
        alone = model.predict_named(x[:5], (name,))[name]
        assert alone.shape == (5,) and np.array_equal(together[name], alone, equal_nan=True), name
    assert model.predict_named(x[:1], ()) == {}


def test_one_row_predictions_are_bit_for_bit_predict_named(trained_store: Path) -> None:
    model = _model(trained_store)
    x = _rows(200)
    count = len(model.names)
    choices = [model.names[i : i + n] for n in range(1, count + 1) for i in (0, count - n)]  # both ends
    for names in choices:
        batch = model.predict_named(x, names)
        for i in range(len(x)):
            row = model.predict_row(x[i : i + 1], names)
            alone = model.predict_named(x[i : i + 1], names)
            assert list(row) == list(names)
            for name in names:
                expected = float(alone[name][0])
                assert row[name] == expected or (math.isnan(row[name]) and math.isnan(expected)), (names, i)
                assert float(batch[name][i]) == expected or math.isnan(expected), (names, i)


def test_a_ladder_that_cannot_merge_runs_one_by_one(
    trained_store: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(files: object, input_name: str) -> bytes:
        raise ValueError("no onnx here")

    monkeypatch.setattr(ladder, "_merged_bytes", broken)
    with caplog.at_level(logging.WARNING):
        model = _model(trained_store)
    assert model._ladder is None
    assert "models not merged into one graph (run one by one): no onnx here" in caplog.text
    assert set(model.predict_named(_rows(1))) == set(model.names)


def test_a_merged_graph_that_differs_is_not_used(
    trained_store: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_run = ladder.Ladder.run

    def off_by_one(self: ladder.Ladder, input_name: str, x: np.ndarray) -> dict[str, np.ndarray]:
        return {name: value + 1 for name, value in real_run(self, input_name, x).items()}

    monkeypatch.setattr(ladder.Ladder, "run", off_by_one)
    with caplog.at_level(logging.WARNING):
        model = _model(trained_store)
    assert model._ladder is None and "differs from model" in caplog.text


def test_too_few_models_are_not_merged() -> None:
    assert ladder.merge({"a": b"", "b": b""}, "features", bytes, np.zeros((1, 1)), lambda n, x: x) is None
