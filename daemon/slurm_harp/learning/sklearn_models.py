"""HARP's own regressors, the comparison models: a linear regression, a decision tree and a small
MLP (scikit-learn) on median-imputed features, and their ONNX export. Their one home: learning.family
fits them beside the boosters, and `harp evaluate`'s HARP-style baseline (evaluation.harpstyle) fits
the same models."""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import Any, Literal, get_args

import numpy as np

from slurm_harp.model.card import INPUT_NAME

Kind = Literal["linear", "tree", "mlp"]
KINDS: tuple[str, ...] = get_args(Kind)  # plain names: the family's configuration holds str
# The MLP trains until its held-out score stops improving; 200 passes (scikit-learn's default) let
# it get there. On the archive traces the HARP-style baseline's stopped after 55-146 passes, the
# family's after 37-75 (KTH-SP2, LANL-CM5): a cap of 40 stopped most of them short, a weaker
# comparison than HARP's own.
MLP_MAX_ITER = 200
# Early stopping holds out a tenth of the rows: under 100 rows that is too few to judge when to stop
# (under 10 scikit-learn refuses), so small sets train for MLP_MAX_ITER passes.
EARLY_STOPPING_ROWS = 100


def build(kind: str, rows: int, seed: int) -> Any:
    """An unfitted pipeline of ``kind`` (one of KINDS) for ``rows`` training rows."""
    # sklearn is the `train` extra: imported here so that importing this module does not need it.
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression
    from sklearn.neural_network import MLPRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeRegressor

    impute = SimpleImputer(strategy="median", keep_empty_features=True)
    if kind == "linear":
        return make_pipeline(impute, StandardScaler(), LinearRegression())
    if kind == "tree":
        return make_pipeline(
            impute, DecisionTreeRegressor(max_depth=12, min_samples_leaf=20, random_state=seed)
        )
    if kind == "mlp":
        mlp = MLPRegressor(
            hidden_layer_sizes=(32, 16),
            early_stopping=rows >= EARLY_STOPPING_ROWS,
            max_iter=MLP_MAX_ITER,
            batch_size=256,
            random_state=seed,
        )
        return make_pipeline(impute, StandardScaler(), mlp)
    raise ValueError(f"unknown model kind {kind!r}, expected one of {KINDS}")


def fit(kind: str, x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    """A fitted pipeline of ``kind`` (one of KINDS) on feature rows ``x`` and model-space ``y``.

    It learns from float32 rows, as its ONNX export reads them."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    model = build(kind, len(y), seed)
    # The MLP on one BLAS thread: a second one only spins on its small products (on 100 k rows the
    # same model in 3.6 s for 3.7 s of CPU, against 3.9 s for 5.9 s), and fitted beside the boosters
    # (learning.family) it took their CPU. The linear model keeps its BLAS: its solution would move.
    limit = threadpool_limits(1, user_api="blas") if kind == "mlp" else nullcontext()
    with warnings.catch_warnings(), limit:
        warnings.simplefilter("ignore")  # convergence warnings: the MLP is a comparison, capped
        model.fit(x.astype(np.float32), y)
    return model


def to_onnx(model: Any, n_features: int) -> bytes:
    """ONNX bytes of a fitted pipeline over ``n_features`` float inputs."""
    from skl2onnx import convert_sklearn  # type: ignore[import-untyped]
    from skl2onnx.common.data_types import FloatTensorType  # type: ignore[import-untyped]

    # Here, not above: evaluation.lineup imports this module for the HARP-style baseline, and
    # booster would load LightGBM and ONNX into runs that need neither.
    from slurm_harp.learning import booster

    onx = convert_sklearn(
        model,
        initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))],
        target_opset=booster.TARGET_OPSET,
    )
    data: bytes = onx.SerializeToString()
    return data
