"""One fitted model of the family (learning.family) as training handles it: its model-space
predictions and its ONNX export, checked against them. A history member ("hist_<feature>") is
no fitted model but one history feature's column, exported as a graph that picks it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from slurm_harp.learning import booster, sklearn_models
from slurm_harp.learning.booster import ParityError
from slurm_harp.model.card import INPUT_NAME

BOOSTED = ("quantile", "huber", "eloss")
HISTORY = "history"
# sklearn runs float32 inputs through float64 weights natively, ONNX in float32: 1e-3 in log
# space is a 0.1 % error on the prediction.
SKLEARN_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # "quantile", "huber", "eloss", "linear", "tree", "mlp"
    quantile: float | None  # the level a quantile (or E-Loss) model aims at
    model: Any

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Model-space predictions (float64) for float32 feature rows."""
        rows = x if x.dtype == np.float32 else x.astype(np.float32)
        if self.kind == HISTORY:
            column: np.ndarray = rows[:, int(self.model)].astype(np.float64)
            return column
        if self.kind in BOOSTED:
            return booster.predict_raw(self.model, rows)
        out: np.ndarray = np.asarray(self.model.predict(rows), dtype=np.float64).reshape(-1)
        return out

    def export(self, x_check: np.ndarray) -> tuple[bytes, float]:
        """ONNX bytes and the parity error; ParityError beyond the tolerance."""
        if self.kind in BOOSTED:
            return booster.export_checked(self.model, x_check)
        data = _column_onnx(int(self.model), x_check.shape[1]) if self.kind == HISTORY else None
        data = data or sklearn_models.to_onnx(self.model, x_check.shape[1])
        probes = np.vstack([x_check, np.zeros((1, x_check.shape[1]))]).astype(np.float32)
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        got = np.asarray(session.run(None, {INPUT_NAME: probes})[0], dtype=np.float64).reshape(-1)
        native = self.predict(probes)
        same_nan = np.array_equal(np.isnan(got), np.isnan(native))
        error = float(np.nanmax(np.abs(got - native), initial=0.0)) if same_nan else math.inf
        if not error <= SKLEARN_TOLERANCE:
            raise ParityError(f"{self.name}: ONNX export differs from sklearn by {error:.3g}")
        return data, error


def history_members(names: Sequence[str], feature_names: Sequence[str]) -> list[Member]:
    """One "hist_<feature>" member per history feature that exists (others are skipped)."""
    return [
        Member(f"hist_{name.split('_', 1)[1]}", HISTORY, None, feature_names.index(name))
        for name in names
        if name in feature_names
    ]


def _column_onnx(column: int, n_features: int) -> bytes:
    """A graph that outputs column ``column`` of the input as an (n, 1) float tensor."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["index"], value=helper.make_tensor("i", TensorProto.INT64, [1], [column])
            ),
            helper.make_node("Gather", [INPUT_NAME, "index"], ["variable"], axis=1),
        ],
        "history_column",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [None, n_features])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", booster.TARGET_OPSET)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data
