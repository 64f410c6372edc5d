"""HARP's own regressors, the comparison models: a linear regression, a decision tree and a small
MLP (scikit-learn) on median-imputed features, and their ONNX export. learning.family fits them
beside the boosters."""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from slurm_harp.learning import booster
from slurm_harp.model.card import INPUT_NAME

KINDS = ("linear", "tree", "mlp")


def fit(kind: str, x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    """A fitted pipeline of ``kind`` (one of KINDS) on feature rows ``x`` and model-space ``y``."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeRegressor

    impute = SimpleImputer(strategy="median", keep_empty_features=True)
    if kind == "linear":
        model = make_pipeline(impute, StandardScaler(), LinearRegression())
    elif kind == "tree":
        model = make_pipeline(
            impute, DecisionTreeRegressor(max_depth=12, min_samples_leaf=20, random_state=seed)
        )
    else:
        mlp = MLPRegressor(
            hidden_layer_sizes=(32, 16),
            early_stopping=len(y) >= 100,
            max_iter=40,
            batch_size=256,
            random_state=seed,
        )
        model = make_pipeline(impute, StandardScaler(), mlp)
    # The MLP on one BLAS thread: a second one only spins on its small products (on 100 k rows the
    # same model in 3.6 s for 3.7 s of CPU, against 3.9 s for 5.9 s), and fitted beside the boosters
    # (learning.family) it took their CPU. The linear model keeps its BLAS: its solution would move.
    limit = threadpool_limits(1, user_api="blas") if kind == "mlp" else nullcontext()
    with warnings.catch_warnings(), limit:
        warnings.simplefilter("ignore")  # convergence warnings: the MLP is a comparison, capped on purpose
        model.fit(x.astype(np.float32), y)
    return model


def to_onnx(model: Any, n_features: int) -> bytes:
    """ONNX bytes of a fitted pipeline over ``n_features`` float inputs."""
    from skl2onnx import convert_sklearn  # type: ignore[import-untyped]
    from skl2onnx.common.data_types import FloatTensorType  # type: ignore[import-untyped]

    onx = convert_sklearn(
        model,
        initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))],
        target_opset=booster.TARGET_OPSET,
    )
    data: bytes = onx.SerializeToString()
    return data
