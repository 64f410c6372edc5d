"""The card sections a training run writes: validation figures, selection, calibration, window."""

from __future__ import annotations

import logging
import math
import platform
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from slurm_harp.core import accuracy
from slurm_harp.learning.calibration import too_few
from slurm_harp.learning.dataset import Dataset
from slurm_harp.learning.targets import TargetData
from slurm_harp.model.card import quantile_key

if TYPE_CHECKING:
    from slurm_harp.learning.fitting import Fitted, MethodConfig
    from slurm_harp.learning.trainer import Rows

log = logging.getLogger(__name__)

CENSORING_NOTE = (
    "censored jobs (stopped at a limit) are kept: a quantile model's first trees (LightGBM's "
    "quantile loss) read them as observed, its last censored_rounds trees use a one-sided loss "
    "on them (no loss once the prediction reaches the observed value); the huber and eloss "
    "models start from quantile trees, then use a one-sided loss; HARP's comparison models "
    "(linear, tree, mlp) read them as observed"
)
WEIGHT_NOTE = {
    "time": "cores (min_cpus): a saved minute is a saved core-minute",
    "memory": "nodes x requested hours",
    "cpus": "requested hours",
}


def _finite(stats: dict[str, float]) -> dict[str, float | None]:
    # JSON has no NaN: a statistic over an empty set is null in the card.
    return {k: (float(v) if math.isfinite(v) else None) for k, v in stats.items()}


def legacy_validation(fitted: Fitted, val: TargetData) -> dict[str, dict[str, float | None]]:
    """Per quantile model ("0.90": metrics) and the request, as the daemon serves them: each model
    alone (policy.limits = "quantile" serves one through model.runtime's predict_quantile, the
    calibrated rule reads each unsorted), capped at the request. ``val``: the validation rows
    ``fitted.predictions`` were made for."""
    quantiles = [
        (m.quantile, name) for name, m in fitted.members.items() if m.kind == "quantile" and m.quantile
    ]
    quantiles.sort(key=lambda pair: pair[0])
    out: dict[str, dict[str, float | None]] = {}
    done = ~val.censored & np.isfinite(val.value)
    if quantiles:
        # Not sorted across quantiles: where the models cross, what is served is each one's own.
        predicted = np.stack([fitted.predictions[name] for _, name in quantiles])
        predicted = np.fmin(predicted, val.requested)  # fmin: a NaN request leaves the prediction
        for i, (q, _) in enumerate(quantiles):
            stats = accuracy.summary(
                predicted[i][done], val.value[done], val.requested[done], val.waste_weight[done]
            )
            stats["censored_n"] = float(np.sum(val.censored))
            stats["censored_upp"] = accuracy.upp(predicted[i][val.censored], val.value[val.censored])
            out[quantile_key(q)] = _finite(stats)
    with np.errstate(invalid="ignore"):
        has_request = done & (val.requested > 0)
    out["request"] = _finite(
        accuracy.summary(val.requested[has_request], val.value[has_request], val.requested[has_request])
    )
    return out


def selection_section(fitted: Fitted, config: MethodConfig) -> dict[str, Any]:
    return {
        "window": "validation",
        "policy": config.selection.as_dict(),
        "chosen": fitted.chosen,
        "table": {name: _finite(stats) for name, stats in fitted.table.items()},
    }


def calibration_section(fitted: Fitted, config: MethodConfig) -> dict[str, Any]:
    """core.safety_rule.Calibration.to_dict() plus how it was chosen and what it did on validation."""
    out = fitted.calibration.to_dict()
    out["weight"] = WEIGHT_NOTE[fitted.target.value]
    out["kill_budget"] = config.calibration.kill_budget
    out["chunks"] = config.calibration.chunks
    out["validation"] = _finite(fitted.figures)
    if (few := too_few(fitted.figures)) is not None:
        out["too_few_jobs"] = few
    return out


def _iso(epoch: float) -> str | None:
    """``epoch`` as an ISO time; None (null in the card) when it is not finite or not in a year
    datetime holds (1 to 9999): a job store may hold a time from a clock's error or a trace's
    bad header (year 27969), and a card must not fail training for good over it."""
    if not math.isfinite(epoch):
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC).isoformat()
    except (ValueError, OverflowError, OSError) as exc:
        log.warning(
            "the model card's window: time %r (unix seconds) is no date (%s): written as null", epoch, exc
        )
        return None


def window(data: Dataset, td: TargetData, rows: Rows, source: str, seconds: float) -> dict[str, Any]:
    submits = data.submit_time[np.isfinite(data.submit_time)]
    labelled = td.labelled()
    # Both windows count the same jobs: those with an observed value (censored ones included);
    # the rule's own count, the usable jobs with a request, is calibration.validation.jobs.
    return {
        "source": source,
        "rows": len(data),
        "rows_train": int(labelled[rows.train].sum()),
        "rows_validation": int(labelled[rows.validation].sum()),
        "rows_dropped_running_at_cutoff": rows.dropped,
        "censored_train": int(np.sum(td.censored[rows.train] & labelled[rows.train])),
        "censored_validation": int(np.sum(td.censored[rows.validation] & labelled[rows.validation])),
        "first_submit": _iso(float(submits.min())) if submits.size else None,
        "last_submit": _iso(float(submits.max())) if submits.size else None,
        # Promotion judges a later version only on jobs submitted after this (out of sample).
        "last_submit_epoch": float(submits.max()) if submits.size else None,
        "validation_from": _iso(rows.cutoff),
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
