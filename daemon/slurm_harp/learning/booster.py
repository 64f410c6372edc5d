"""Gradient boosting (LightGBM): quantile models, custom asymmetric losses, and ONNX export.

One model per quantile because multi-quantile tree models have been seen to convert without
error yet give wrong output; every exported model is checked against its native twin.
A custom-loss model starts from a built-in quantile model (LightGBM does not store the init
score of a custom objective, and the built-in objective re-fits leaves to exact quantiles)
and continues boosting with the custom gradients; the converter does not know custom
objectives, so the booster is relabelled "regression" (identity link, which it is) first.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

import lightgbm as lgb
import numpy as np
import onnxruntime as ort
from onnxmltools import convert_lightgbm
from onnxmltools.convert.common.data_types import FloatTensorType

from slurm_harp.learning.objectives import Loss, lightgbm_objective
from slurm_harp.model.card import INPUT_NAME

# Highest opset the converter and onnxruntime agree on here.
TARGET_OPSET = 15
# In the model's output space (log1p seconds): 1e-4 is a 0.01 % relative error.
PARITY_TOLERANCE = 1e-4


class ParityError(Exception):
    """The ONNX export does not reproduce the native model."""


@dataclass(frozen=True)
class BoosterParams:
    # 100 trees at 0.1 retrain in about 0.7 of the time and do as well for walltime on validation,
    # but the calibrated rule cut less CPU waste there (experiments/tried.md): a site's choice
    # (`harp train --trees --learning-rate`), not the default.
    n_estimators: int = 200
    num_leaves: int = 31
    learning_rate: float = 0.05
    min_child_samples: int = 20
    # One thread by default: on idle cores a second one saves little, but LightGBM's OpenMP
    # threads spin, and with the cores busy (slurmctld, the daemon) two threads ran far slower
    # and took CPU from the daemon serving submissions.
    n_jobs: int = 1
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TrainingSet:
    """Training rows binned once for every booster fitted on them: on 300 k rows the binning
    costs about a tenth of a 200-tree fit, and the ladder fits seven models on the same rows.

    A continued fit (``continued``) leaves the base model's scores on the set as init scores,
    and a plain fit on such a set would no longer start from the label's average. So a plain
    fit after a continued one bins the rows again: correct in any order, fastest with the
    plain fits first. Results are those of a fresh set per fit (tested)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, params: BoosterParams, leaf_rows: bool = False) -> None:
        """``leaf_rows``: fits on this set may ask for their own least rows per leaf."""
        self._x, self._y, self._params, self._leaf_rows = x, y, params, leaf_rows
        self._data = self._binned()
        self._continued = False

    def _binned(self) -> lgb.Dataset:
        # The raw rows stay: continued training predicts its base model's scores from them.
        # LightGBM drops the features no leaf of min_child_samples rows can split at binning, and
        # refuses a later fit with fewer rows per leaf; a set whose fits vary keeps them all.
        params = _train_params(self._params) | ({"feature_pre_filter": False} if self._leaf_rows else {})
        return lgb.Dataset(self._x, self._y, params=params, free_raw_data=False)

    def quantile(
        self, alpha: float, rounds: int, base: lgb.Booster | None = None, leaf_rows: int | None = None
    ) -> lgb.Booster:
        """A booster for the ``alpha`` quantile of the labels (NaN features = missing); with
        ``base``, that model plus ``rounds`` such trees (each leaf re-fit to the rows' quantile).
        ``leaf_rows``: least rows per leaf (default: min_child_samples; needs a ``leaf_rows`` set)."""
        train_params = _quantile_params(self._params, alpha)
        if leaf_rows is not None:
            if not self._leaf_rows:
                raise ValueError("leaf_rows on a set binned without leaf_rows=True")
            train_params["min_child_samples"] = leaf_rows
        if base is not None:
            self._continued = True
            return lgb.train(
                train_params, self._data, num_boost_round=rounds, init_model=base, keep_training_booster=False
            )
        return lgb.train(train_params, self._plain(), num_boost_round=rounds)

    def quantiles(self, alphas: Sequence[float], rounds: int) -> list[lgb.Booster]:
        """``quantile(alpha, rounds)`` for each alpha, fitted side by side on ``n_jobs`` threads of
        one LightGBM thread each (a plain fit only reads the binned rows, and LightGBM works
        without the GIL). Each model is the one-thread fit's, whatever ``n_jobs`` (tested); end to
        end the retrain moved by no more than runs vary (README, benchmarks)."""
        workers = min(self._params.n_jobs, len(alphas))
        if workers <= 1:
            return [self.quantile(alpha, rounds) for alpha in alphas]
        data = self._plain().construct()  # once, before the threads share it
        single = replace(self._params, n_jobs=1)

        def fit(alpha: float) -> lgb.Booster:
            return lgb.train(_quantile_params(single, alpha), data, num_boost_round=rounds)

        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fit, alphas))

    def _plain(self) -> lgb.Dataset:
        """The binned rows for a fit from scratch: binned again if a continued fit left its base
        model's scores on them."""
        if self._continued:
            self._data, self._continued = self._binned(), False
        return self._data

    def continued(self, base: lgb.Booster, loss: Loss, censored: np.ndarray, rounds: int) -> lgb.Booster:
        """``base`` plus ``rounds`` trees fitted to ``loss``; ``censored`` flags the rows.

        The result predicts raw model-space values and exports like any regression booster."""
        if rounds <= 0:
            return base
        train_params = {**_train_params(self._params), "objective": lightgbm_objective(loss, censored)}
        self._continued = True
        try:
            return lgb.train(
                train_params, self._data, num_boost_round=rounds, init_model=base, keep_training_booster=False
            )
        except lgb.basic.LightGBMError as exc:
            # Every feature constant (a few identical jobs): nothing to split on, nothing to refine.
            if "num_features" not in str(exc):
                raise
            return base


def _train_params(params: BoosterParams) -> dict[str, Any]:
    """LightGBM's parameters for ``params`` (the sklearn wrapper's defaults otherwise)."""
    return {
        "num_leaves": params.num_leaves,
        "learning_rate": params.learning_rate,
        "min_child_samples": params.min_child_samples,
        "num_threads": params.n_jobs,
        "seed": params.seed,
        "deterministic": True,
        "verbose": -1,
    }


def _quantile_params(params: BoosterParams, alpha: float) -> dict[str, Any]:
    return {**_train_params(params), "objective": "quantile", "alpha": alpha}


def _exportable(model: lgb.Booster) -> lgb.Booster:
    """A booster with a custom objective has no objective line: give it "regression"."""
    text: str = model.model_to_string()
    header, _, rest = text.partition("\nTree=")
    if any(line.startswith("objective=") for line in header.splitlines()):
        return model
    lines = header.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("max_feature_idx=")) + 1
    lines.insert(at, "objective=regression")
    relabelled = lgb.Booster(model_str="\n".join(lines) + "\nTree=" + rest)
    # The converter reads the parameters before the model text; those still say "custom".
    relabelled.params["objective"] = "regression"
    return relabelled


def to_onnx(model: lgb.Booster, n_features: int) -> bytes:
    onx = convert_lightgbm(
        _exportable(model),
        initial_types=[(INPUT_NAME, FloatTensorType([None, n_features]))],
        target_opset=TARGET_OPSET,
    )
    data: bytes = onx.SerializeToString()
    return data


def predict_raw(model: lgb.Booster, x: np.ndarray) -> np.ndarray:
    """Model-space predictions of a booster."""
    out: np.ndarray = np.asarray(model.predict(x), dtype=np.float64)
    return out


def parity_error(model: lgb.Booster, onnx_model: bytes, x: np.ndarray) -> float:
    """Max |native - ONNX| over the rows of ``x`` plus an all-missing and an all-zero row."""
    probes = np.vstack([x, np.full((1, x.shape[1]), np.nan), np.zeros((1, x.shape[1]))]).astype(np.float32)
    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    onnx_out = np.asarray(session.run(None, {INPUT_NAME: probes})[0], dtype=np.float64).reshape(-1)
    native = np.asarray(predict_raw(model, probes), dtype=np.float64).reshape(-1)
    if onnx_out.shape != native.shape:
        raise ParityError(f"ONNX gives {onnx_out.shape[0]} values for {native.shape[0]} rows")
    return float(np.max(np.abs(onnx_out - native)))


def export_checked(
    model: lgb.Booster, x_check: np.ndarray, tolerance: float = PARITY_TOLERANCE
) -> tuple[bytes, float]:
    """ONNX bytes of ``model`` and the parity error; ParityError when it exceeds ``tolerance``."""
    data = to_onnx(model, x_check.shape[1])
    error = parity_error(model, data, x_check)
    if not error <= tolerance:  # also catches NaN
        raise ParityError(f"ONNX export differs from LightGBM by {error:.3g} (tolerance {tolerance:.3g})")
    return data, error
