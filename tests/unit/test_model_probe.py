"""The probe a version's models answer at load (model.probe, QuantileModel._probe and _probe_one_row):
negative answers, a fixed batch and a model that fails one row are rejected before they serve."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.model.card import CARD_FILE
from slurm_harp.model.row_run import RowRun
from slurm_harp.model.runtime import ModelError, QuantileModel
from slurm_harp.model.store import ModelStore
from slurm_harp.server.reloader import reload_models
from tests.conftest import REPO

REFERENCE = next((REPO / "models" / "reference" / "time").glob("*/card.json")).parent
WIDTH = len(FEATURE_NAMES)


def constant_model(raw: float, rows: int | None = None, reshape_to: int | None = None) -> bytes:
    """An ONNX model answering ``raw`` (model space) for every row. ``rows``: a fixed batch size
    instead of a dynamic one; ``reshape_to``: a dynamic batch, but its rows reshaped to that many
    first (a graph that runs only that many rows at a time)."""
    nodes = [
        helper.make_node("IsNaN", ["features"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "features"], ["filled"]),  # NaN features -> 0
        helper.make_node("MatMul", ["filled", "w"], ["product"]),
        helper.make_node("Add", ["product", "c"], ["variable"]),
    ]
    initializers = [
        helper.make_tensor("w", TensorProto.FLOAT, [WIDTH, 1], [0.0] * WIDTH),
        helper.make_tensor("c", TensorProto.FLOAT, [1], [raw]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
    ]
    if reshape_to is not None:
        nodes[0].input[0] = nodes[1].input[2] = "reshaped"
        nodes.insert(0, helper.make_node("Reshape", ["features", "shape"], ["reshaped"]))
        initializers.append(helper.make_tensor("shape", TensorProto.INT64, [2], [reshape_to, WIDTH]))
    graph = helper.make_graph(
        nodes,
        "constant",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [rows, WIDTH])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [rows, 1])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    """A store serving the reference model (seven quantile models, merged for the calibrated rule)."""
    card = json.loads((REFERENCE / CARD_FILE).read_text())
    files = {name: (REFERENCE / name).read_bytes() for name in card["files"]}
    kept = {k: v for k, v in card.items() if k not in ("version", "created", "files", "target")}
    store = ModelStore(tmp_path / "store")
    store.publish(Target.TIME, files, kept)
    return store


def with_model(store: ModelStore, name: str, data: bytes, kind: str | None = None) -> Path:
    """A copy of the serving version, published as the next one, with model ``name``'s file
    replaced by ``data`` (checksums to match), or added as a model of ``kind``."""
    serving = store.current_dir(Target.TIME)
    assert serving is not None
    card: dict[str, Any] = json.loads((serving / CARD_FILE).read_text())
    files = {file: (serving / file).read_bytes() for file in card["files"]}
    files[f"{name}.onnx"] = data
    if kind is not None:
        card["models"].append({"name": name, "kind": kind, "quantile": None, "file": f"{name}.onnx"})
    kept = {k: v for k, v in card.items() if k not in ("version", "created", "files", "target")}
    version = store.publish(Target.TIME, files, kept)
    return store.target_dir(Target.TIME) / version


def test_a_model_answering_negative_values_is_rejected_naming_it_and_the_value(
    store: ModelStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A median of raw -5 (log1p seconds) passed every check and served 0 minutes for every job:
    the rule then cut every request to its floor. The last good model keeps serving."""
    good = reload_models(store.root, {}, None).models
    broken = with_model(store, "q0.50", constant_model(-5.0))
    with pytest.raises(ModelError) as err:
        QuantileModel.load(broken)
    assert (
        str(err.value)
        == f"{broken}: q0.5: probe gave -5: negative (log1p_seconds: no job's value is below 0)"
    )
    result = reload_models(store.root, good, None)
    assert result.models[Target.TIME] is good[Target.TIME]
    assert result.rejected == (f"time: {err.value}",)


def test_a_value_a_hair_below_zero_loads_and_its_clamp_is_logged_once_per_version(
    store: ModelStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Quantile trees may answer a made-up row a little below 0 where jobs last a few seconds: such a
    model loads. Served, the clamp to 0 is logged once for the version, not at every submission
    (the probe's own clamp is not logged)."""
    version = with_model(store, "q0.50", constant_model(-0.3))
    with caplog.at_level(logging.WARNING):
        model = QuantileModel.load(version)
        assert "below 0" not in caplog.text
        row = np.ones((1, WIDTH), dtype=np.float32)
        for _ in range(3):
            assert model.predict_quantile(row, 0.5)[0] == 0.0
            assert model.predict_row(row, ("q0.50",)) == {"q0.50": 0.0}
            assert model.predict(np.ones((4, WIDTH), dtype=np.float32))[0.5].tolist() == [0.0] * 4
    said = [r.getMessage() for r in caplog.records if "below 0" in r.getMessage()]
    assert said == [
        f"time model {version.name}: raw prediction -0.3 (log1p_seconds) below 0, served as 0; "
        "not logged again for it"
    ]


@pytest.mark.parametrize(("kind", "loads"), [("linear", True), ("mlp", True), ("tree", False), (None, False)])
def test_only_models_that_extrapolate_may_answer_the_probe_below_zero(
    store: ModelStore, kind: str | None, loads: bool
) -> None:
    """A linear model or an MLP answers the probe's made-up rows with anything (-4 and -5 for a site's
    CPU models whose least answer on its jobs was 0.5): its answer must be finite only. A tree, or a
    model the card gives no kind, is held to the probe."""
    name = f"extra_{kind}"
    version = with_model(store, name, constant_model(-5.0), kind="unknown")
    card_path = version / CARD_FILE
    card = json.loads(card_path.read_text())
    entry = next(m for m in card["models"] if m["name"] == name)
    if kind is None:
        del entry["kind"]
    else:
        entry["kind"] = kind
    card_path.write_text(json.dumps(card))
    if loads:
        assert name in QuantileModel.load(version).names
    else:
        with pytest.raises(ModelError, match=f"{name}: probe gave -5: negative"):
            QuantileModel.load(version)


def test_a_model_of_a_fixed_batch_size_is_rejected(store: ModelStore) -> None:
    """Input [2, width]: it passed the two-row probe, replaced the good model, and every submission
    (one row) then failed as model_error."""
    good = reload_models(store.root, {}, None).models
    version = with_model(store, "q0.90", constant_model(8.0, rows=2))
    result = reload_models(store.root, good, None)
    assert result.models[Target.TIME] is good[Target.TIME]
    assert result.rejected == (
        f"time: {version / 'q0.90.onnx'}: input shape [2, {WIDTH}]: its rows must be a dynamic dimension "
        "(the daemon runs one row per submission, promotion thousands)",
    )


def test_a_model_that_cannot_run_one_row_is_rejected(store: ModelStore) -> None:
    """A dynamic batch dimension, but a graph that runs two rows only: binding its one-row run was
    a warning, and session.run then failed every submission."""
    version = with_model(store, "q0.90", constant_model(8.0, reshape_to=2))
    with pytest.raises(ModelError, match=r"q0\.90\.onnx: cannot run one row: .*Reshape"):
        QuantileModel.load(version)


def test_the_paths_a_submission_takes_are_probed_with_one_row_at_load(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails one row where the batch probe passed (here the bound run of each model the
    calibrated rule reads) rejects the version at load, not every submission after it."""
    version = store.current_dir(Target.TIME)
    assert version is not None
    QuantileModel.load(version)  # the reference loads

    def broken(self: RowRun, x: np.ndarray) -> float:
        raise RuntimeError("bound buffers gone")

    monkeypatch.setattr(RowRun, "first", broken)
    with pytest.raises(ModelError, match=r"q0\.50: one-row probe run failed: bound buffers gone"):
        QuantileModel.load(version)


def test_the_reference_and_a_model_trained_on_kth_load_without_a_clamp(
    trained_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The negative check's tolerance holds back no model harp trains: the reference's, and one of
    the KTH trace (`harp demo`'s), whose answers to the probe are 2.7 and more."""
    kth = tmp_path / "kth"
    shutil.copytree(trained_store, kth)
    with caplog.at_level(logging.WARNING):
        for root in (REFERENCE.parent.parent, kth):
            result = reload_models(root, {}, None)
            assert result.rejected == () and Target.TIME in result.models
    assert "below 0" not in caplog.text
