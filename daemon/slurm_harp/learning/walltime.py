"""Train, validate and export the walltime model: records in, ONNX files and a card out.

Target: log1p(elapsed seconds); the daemon applies expm1 and converts to minutes (quantiles
survive monotone transforms, so this is the same quantile of the run time).

Censored jobs (stopped at their limit) are kept with their observed run time as the label.
Their true run time is at least that, so the fitted quantiles are biased low for jobs that
look like them: a conservative reading is that the model's under-prediction rate on such
jobs is a lower bound. A censored objective is a later refinement; dropping them would bias
the model further (it would never see the jobs that run longest).
"""

from __future__ import annotations

import logging
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.core import metrics
from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.learning.booster import BoosterParams, export_checked, fit_quantile
from slurm_harp.learning.dataset import Dataset, Split, build_dataset, chronological_split
from slurm_harp.model.card import CARD_FORMAT, quantile_file_name, quantile_key, to_unit

log = logging.getLogger(__name__)

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.95)
TRANSFORM = "log1p_seconds"
MIN_TRAIN_ROWS = 50
MIN_VALIDATION_ROWS = 10
PARITY_ROWS = 2000


class TrainingError(Exception):
    """Training cannot produce a model worth publishing (too little data, failed parity)."""


@dataclass(frozen=True)
class TrainResult:
    files: dict[str, bytes]
    card: dict[str, Any]
    validation: dict[str, dict[str, float | None]] = field(default_factory=dict)


def train_walltime(
    records: Sequence[JobRecord],
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    source: str = "",
    params: BoosterParams | None = None,
    validation_fraction: float = 0.2,
    max_rows: int | None = None,
) -> TrainResult:
    """Fit one LightGBM model per quantile on the older jobs, validate on the most recent
    ``validation_fraction``, export each to ONNX and check it reproduces the native model.

    The published models are the validated ones (not refitted on all jobs), so the card's
    metrics describe exactly what is served. Raises TrainingError when nothing fit to publish.
    """
    params = params or BoosterParams()
    quantiles = sorted({float(q) for q in quantiles})
    if not quantiles or not all(0.0 < q < 1.0 for q in quantiles):
        raise TrainingError(f"quantiles must lie in (0, 1): {quantiles}")
    started = time.monotonic()
    data = build_dataset(records, max_rows=max_rows)
    split = chronological_split(data, validation_fraction) if len(data) else None
    if split is None or len(split.train) < MIN_TRAIN_ROWS or len(split.validation) < MIN_VALIDATION_ROWS:
        raise TrainingError(
            f"not enough jobs: {len(data)} usable, need {MIN_TRAIN_ROWS} to train "
            f"and {MIN_VALIDATION_ROWS} to validate"
        )
    train, val = split.train, split.validation
    y_train = np.log1p(train.elapsed_s)
    check_rows = val.x[-PARITY_ROWS:]
    files: dict[str, bytes] = {}
    entries: list[dict[str, Any]] = []
    raw_val: list[np.ndarray] = []
    parity = 0.0
    for q in quantiles:
        model = fit_quantile(train.x, y_train, q, params)
        try:
            data_onnx, error = export_checked(model, check_rows)
        except Exception as exc:
            raise TrainingError(f"q{q}: {exc}") from exc
        parity = max(parity, error)
        name = quantile_file_name(q)
        files[name] = data_onnx
        entries.append({"quantile": q, "file": name})
        raw_val.append(np.asarray(model.predict(val.x), dtype=np.float64))
    validation = _evaluate(quantiles, raw_val, val)
    card = {
        "format": CARD_FORMAT,
        "target": Target.TIME.value,
        "features": list(FEATURE_NAMES),
        "transform": TRANSFORM,
        "unit": "minutes",
        "quantiles": entries,
        "training": _window(data, split, source, time.monotonic() - started),
        "validation": validation,
        "parity_max_abs_error": parity,
        "libraries": library_versions(),
        "params": params.as_dict(),
        "censoring": "censored jobs kept with their observed run time as label (biased low)",
        "evaluation": "validation predictions capped at the request; finished jobs only, "
        "censored ones reported apart (censored_upp)",
    }
    return TrainResult(files=files, card=card, validation=validation)


def _evaluate(
    quantiles: list[float], raw: list[np.ndarray], val: Dataset
) -> dict[str, dict[str, float | None]]:
    """Metrics in minutes, with predictions post-processed exactly as the daemon does and then
    capped at the user's request where there is one (the policy never raises a limit)."""
    predicted = np.sort(to_unit(TRANSFORM, np.stack(raw)), axis=0)
    predicted = np.fmin(predicted, val.requested_min)  # fmin: a NaN request leaves the prediction
    actual = val.elapsed_s / 60.0
    done = ~val.censored
    out: dict[str, dict[str, float]] = {}
    for i, q in enumerate(quantiles):
        stats = metrics.summary(predicted[i][done], actual[done], val.requested_min[done], val.cores[done])
        # A censored job ran at least this long: a prediction below it is surely an under-prediction.
        stats["censored_n"] = float(np.sum(val.censored))
        stats["censored_upp"] = metrics.upp(predicted[i][val.censored], actual[val.censored])
        out[quantile_key(q)] = stats
    has_request = done & np.isfinite(val.requested_min)
    out["request"] = metrics.summary(
        val.requested_min[has_request], actual[has_request], val.requested_min[has_request]
    )
    # JSON has no NaN: a statistic over an empty set is null in the card.
    return {key: {k: v if math.isfinite(v) else None for k, v in stats.items()} for key, stats in out.items()}


def _iso(epoch: float) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if math.isfinite(epoch) else None


def _window(data: Dataset, split: Split, source: str, seconds: float) -> dict[str, Any]:
    submits = data.submit_time[np.isfinite(data.submit_time)]
    return {
        "source": source,
        "rows": len(data),
        "rows_train": len(split.train),
        "rows_validation": len(split.validation),
        "rows_dropped_running_at_cutoff": split.dropped,
        "censored_train": int(np.sum(split.train.censored)),
        "censored_validation": int(np.sum(split.validation.censored)),
        "first_submit": _iso(float(submits.min())) if submits.size else None,
        "last_submit": _iso(float(submits.max())) if submits.size else None,
        "validation_from": _iso(split.cutoff),
        "seconds": round(seconds, 3),
    }


def library_versions() -> dict[str, str]:
    import lightgbm
    import onnx
    import onnxmltools
    import onnxruntime

    return {
        "lightgbm": lightgbm.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnxmltools": onnxmltools.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
