"""One-row runs on bound buffers answer exactly as session.run, in every thread at once; a session
whose output is not one value per row keeps session.run."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.model.card import to_unit
from slurm_harp.model.ladder import stacked
from slurm_harp.model.row_run import RowRun
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore

WIDTH = len(FEATURE_NAMES)


def _model(store: Path) -> QuantileModel:
    directory = ModelStore(store).current_dir(Target.TIME)
    assert directory is not None
    return QuantileModel.load(directory)


def _rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    x = rng.normal(2.0, 2.0, size=(n, WIDTH)).astype(np.float32)
    x[rng.random(x.shape) < 0.2] = np.nan
    return x


def _unbound(model: QuantileModel, name: str, row: np.ndarray) -> np.ndarray:
    session, output = model._named[name]
    return np.asarray(session.run([output], {"features": row})[0]).astype(np.float64)


def test_bound_runs_answer_as_session_run(trained_store: Path) -> None:
    model = _model(trained_store)
    assert len(model._row_runs) == len({id(s) for s, _ in model._named.values()})
    assert model._ladder is not None and model._ladder._row_run is not None
    for x in _rows(100):
        row = x[np.newaxis, :]
        for name in model.names:
            bound = model._raw(name, row)
            assert bound.dtype == np.float64 and bound.shape == (1, 1)
            assert np.array_equal(bound, _unbound(model, name, row), equal_nan=True), name
            one = model._row_runs[id(model._named[name][0])].first(row)
            assert np.array_equal(np.array([[one]]), bound, equal_nan=True), name
        everything = stacked([_unbound(model, name, row) for name in model._ladder.names])
        assert np.array_equal(model._ladder.run_stacked("features", row), everything, equal_nan=True)
        for q in model.quantiles:
            session = next(s for quantile, s, _ in model._runs if quantile == q)
            direct = session.run(None, {"features": row})[0].astype(np.float32).reshape(1, -1)
            expected = to_unit(model._transform, direct)
            assert np.array_equal(model.predict_quantile(row, q), expected[0], equal_nan=True), q


def test_threads_keep_their_own_buffers(trained_store: Path) -> None:
    model = _model(trained_store)
    rows = _rows(400)
    name = model.names[0]
    alone = [model._raw(name, x[np.newaxis, :]) for x in rows]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda x: model._raw(name, x[np.newaxis, :]), rows))
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(a, b, equal_nan=True)


def _identity_session() -> ort.InferenceSession:
    """A model whose output is its whole row: not one value per row."""
    node = helper.make_node("Identity", ["features"], ["out"])
    graph = helper.make_graph(
        [node],
        "identity",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [None, WIDTH])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, WIDTH])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_an_output_of_many_values_keeps_session_run() -> None:
    assert RowRun.of(_identity_session(), "features", ["out"], WIDTH) is None


def test_a_session_that_cannot_run_one_row_raises() -> None:
    """It was logged and left to session.run, which failed the same way at every submission: the
    runtime now rejects such a model at load (test_runtime.py)."""

    class Broken:
        def run(self, outputs: object, feed: object) -> list[np.ndarray]:
            raise RuntimeError("no kernel")

    with pytest.raises(RuntimeError, match="no kernel"):
        RowRun.of(Broken(), "features", ["out"], WIDTH)
