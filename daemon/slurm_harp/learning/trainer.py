"""Train one target for the daemon: records in, ONNX files and a format-2 card out.

The last ``validation_fraction`` of jobs (by submit time) validate; the older ones train, minus
those still running when the validation window opened (in production a model trained at time T
only knows jobs that had ended by T). The model is chosen and the rule calibrated there. Then
the published models (every quantile model of the ladder, the chosen one, whatever the rule
reads) are brought up to date with the jobs since, as ``refit`` says (learning.fitting.Refit:
by default fitted again on every job), and served with the rule calibrated before: the same method
`harp evaluate` grades as "ours" (evaluation.ours). The card's validation figures, and the
challenger's standing at promotion, come from the models fitted before the validation window:
out of sample. The card's rule figures are those of the rule on the rows it was calibrated on;
promotion judges a rule chosen and calibrated on earlier rows of the window (learning.promotion).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import ladder_limits
from slurm_harp.learning import card_sections
from slurm_harp.learning.dataset import Dataset, build_dataset
from slurm_harp.learning.fitting import (
    Fitted,
    MethodConfig,
    Refit,
    fit_and_calibrate,
    limits_calibrated_on,
    refreshed,
)
from slurm_harp.learning.limit_outcomes import finished
from slurm_harp.learning.targets import PER_PROCESSOR, TRANSFORM, TargetData, per_node_only, target_data
from slurm_harp.model.card import CARD_FORMAT, UNIT, model_file_name

log = logging.getLogger(__name__)

MIN_TRAIN_ROWS = 50
MIN_VALIDATION_ROWS = 10
PARITY_ROWS = 2000


class TrainingError(Exception):
    """Training cannot produce a model worth publishing (too little data, failed parity)."""


class NotEnoughData(TrainingError):
    """Too few jobs with an observed value to train on, or too few validation jobs that finished
    under their request to calibrate on, for the target."""


@dataclass(frozen=True)
class Window:
    x: np.ndarray
    td: TargetData
    submit_time: np.ndarray
    limits: np.ndarray  # NaN = keeps the request
    # Given some rows of the window, the limits on every row of the rule chosen and calibrated
    # on those rows only (learning.fitting.limits_calibrated_on): promotion judges the others.
    # None: not known (the published rule's ``limits`` only).
    recalibrated: Callable[[np.ndarray], np.ndarray] | None = None
    # Each quantile model's predictions on the window by its quantile, in the target's unit, from
    # the models fitted before it: what a site serving policy.limits = "quantile" is judged by.
    quantile_predictions: Mapping[float, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainResult:
    files: dict[str, bytes]
    card: dict[str, Any]
    # The validation window, where promotion compares versions: features, target data, submit
    # times, and the limits the rule sets there with the models fitted before it (out of sample;
    # the rule's own are in sample, calibrated there: promotion recalibrates it on earlier rows).
    window: Window
    validation: dict[str, dict[str, float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Rows:
    train: np.ndarray
    validation: np.ndarray
    cutoff: float
    dropped: int


def split_rows(data: Dataset, validation_fraction: float) -> Rows:
    """Row indices of the chronological split. As in production, where a model trained at time T
    only knows jobs that had ended by T, training jobs that ended after the first validation
    submission are left out."""
    if not 0.0 < validation_fraction < 1.0:
        raise ValueError(f"validation_fraction {validation_fraction} outside (0, 1)")
    n = len(data)
    first_val = n - max(1, round(n * validation_fraction))
    cutoff = float(data.submit_time[first_val]) if n else math.nan
    train = np.arange(first_val)
    if math.isfinite(cutoff):
        late = np.nan_to_num(data.end_time[:first_val], nan=-math.inf) > cutoff
        return Rows(train[~late], np.arange(first_val, n), cutoff, int(late.sum()))
    return Rows(train, np.arange(first_val, n), cutoff, 0)


def _check_counts(td: TargetData, rows: Rows, total: int, per_processor: int = 0) -> None:
    """Enough jobs to train on, and enough validation jobs that finished under their request
    (limit_outcomes.finished) to calibrate the rule on: a censored job's waste is unknown, so a
    window of them only would calibrate nothing. ``per_processor``: the jobs per_node_only left
    out, named when there are too few and counted in none of the other figures."""
    n_train = int(td.labelled()[rows.train].sum())
    n_val = int(finished(td.take(rows.validation)).sum())
    if n_train < MIN_TRAIN_ROWS or n_val < MIN_VALIDATION_ROWS:
        kept = np.ones(len(td), dtype=bool) if td.per_processor is None else ~td.per_processor
        validation = rows.validation[kept[rows.validation]]
        censored = int(np.sum(td.censored[validation]))
        left = f"; {per_processor} left out: {PER_PROCESSOR}" if per_processor else ""
        raise NotEnoughData(
            f"not enough jobs for {td.target.value}: {total - per_processor} usable, {n_train} with an "
            f"observed value to train (need {MIN_TRAIN_ROWS}) and {n_val} of {validation.size} "
            f"validation jobs that finished under their request to calibrate on (need {MIN_VALIDATION_ROWS}; "
            f"{censored} hit a limit){left}"
        )


def train_target(
    records: Sequence[JobRecord],
    target: Target,
    config: MethodConfig | None = None,
    source: str = "",
    validation_fraction: float = 0.2,
    max_rows: int | None = None,
    data: Dataset | None = None,
    refit: Refit = Refit.FULL,
) -> TrainResult:
    """Fit, choose, calibrate and export ``target``'s models. Raises TrainingError when there is
    nothing fit to publish. ``data``: build_dataset(records, max_rows) when the caller already
    has it (features are the same for every target)."""
    config = config or MethodConfig()
    started = time.monotonic()
    data = data if data is not None else build_dataset(records, max_rows=max_rows)
    if len(data) == 0:
        raise NotEnoughData("not enough jobs: none usable (elapsed > 0)")
    td, per_processor = per_node_only(target_data(records, data, target, max_rows))
    rows = split_rows(data, validation_fraction)
    _check_counts(td, rows, len(data), per_processor)
    if per_processor:
        log.warning("%s: %d of %d jobs left out: %s", target.value, per_processor, len(data), PER_PROCESSOR)
    try:
        fitted = fit_and_calibrate(data.x, td, rows.train, rows.validation, config)
    except ValueError as exc:
        raise TrainingError(str(exc)) from exc
    started_refit = time.monotonic()
    served = refreshed(fitted, refit, data.x, td, np.arange(len(td)), rows.train, config)
    refit_seconds = time.monotonic() - started_refit
    files, entries, parity = _export(served, data.x[rows.validation][-PARITY_ROWS:])
    # Out of sample: the predictions of the models fitted before the validation window.
    val = td.take(rows.validation)
    validation = card_sections.legacy_validation(fitted, val)
    card = {
        "format": CARD_FORMAT,
        "target": target.value,
        "features": list(FEATURE_NAMES),
        "transform": TRANSFORM[target],
        "unit": UNIT[target],
        "quantiles": [e for e in entries if e.get("quantile") is not None and e["kind"] == "quantile"],
        "models": entries,
        "selection": card_sections.selection_section(fitted, config),
        "calibration": card_sections.calibration_section(fitted, config),
        "training": card_sections.window(data, td, rows, source, time.monotonic() - started)
        | {
            "rows_per_processor_left_out": per_processor,
            "refit": refit.value,
            "refit_seconds": round(refit_seconds, 3),
            "ladder_rows": config.family.ladder_max_rows,
            "calibrate_by": config.calibration.by,
        },
        "validation": validation,
        "parity_max_abs_error": parity,
        "libraries": card_sections.library_versions(),
        "params": config.family.params.as_dict(),
        "censoring": card_sections.CENSORING_NOTE,
        "evaluation": "validation predictions capped at the request; finished jobs only, "
        "censored ones reported apart (censored_upp)",
    }
    limits = ladder_limits(fitted.predictions, val.requested, val.weight, fitted.calibration, val.group)
    kinds = {name: m.kind for name, m in fitted.members.items()}
    again = partial(limits_calibrated_on, kinds, fitted.predictions, val, config)
    by_quantile = {
        m.quantile: fitted.predictions[name]
        for name, m in fitted.members.items()
        if m.kind == "quantile" and m.quantile is not None
    }
    submitted = data.submit_time[rows.validation]
    window = Window(data.x[rows.validation], val, submitted, limits, again, by_quantile)
    return TrainResult(files=files, card=card, window=window, validation=validation)


def _export(fitted: Fitted, x_check: np.ndarray) -> tuple[dict[str, bytes], list[dict[str, Any]], float]:
    files: dict[str, bytes] = {}
    entries: list[dict[str, Any]] = []
    parity = 0.0
    for name in fitted.published:
        member = fitted.members[name]
        try:
            data, error = member.export(x_check)
        except Exception as exc:  # converter and onnxruntime raise their own types
            raise TrainingError(f"{name}: {exc}") from exc
        parity = max(parity, error)
        file = model_file_name(name)
        files[file] = data
        entries.append({"name": name, "kind": member.kind, "quantile": member.quantile, "file": file})
    return files, entries, parity
