"""The probe every model of a version answers before the version may serve.

Two made-up feature rows, one missing every feature and a plain one (every feature 1.0), run
through each model: it must answer finite values (a history column only on the plain row: it is
NaN where there is no history) and none below -NEGATIVE_TOLERANCE in model space, where its kind
makes that a test of it. model.runtime runs the rows as a batch (check_batch), then the plain one
alone through each path a submission takes (check_one_row).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from slurm_harp.core.features import FEATURE_NAMES

Run = Callable[[np.ndarray], np.ndarray]  # a model's raw answer (model space) to feature rows
Answer = Callable[[np.ndarray], list[float]]  # one serving path's values (target unit) for one row

# A raw answer (model space: log1p of seconds, MB or CPUs) below -NEGATIVE_TOLERANCE is a model of
# negative quantities: served, it cut every job to its floor. Not below 0 itself: LightGBM's quantile
# trees add up leaf values fitted on different jobs, and where most jobs' values are near 0 (a site
# of jobs of a few seconds), a row unlike any job's, as the probe's are, may come out a little
# below it: -0.12 at the lowest, fitting medians at 6 times the default learning rate on jobs 60 %
# of which were at 0. A sign or transform slip lands lower: no time model learns a value below
# log1p(1 s) = 0.69.
NEGATIVE_TOLERANCE = 0.5
# Model kinds whose answer to made-up rows says nothing of their sign on jobs: they extrapolate (a
# site's CPU models gave -4.2 and -5.3 on the plain row, 0.5 at the least on its jobs). Their
# answers must be finite only; a negative one served is logged (QuantileModel._negative).
_EXTRAPOLATING = ("linear", "mlp")


def rows() -> np.ndarray:
    """A missing-everything row and a plain one."""
    probe = np.full((2, len(FEATURE_NAMES)), np.nan, dtype=np.float32)
    probe[1] = 1.0
    return probe


def problem(out: np.ndarray, kind: object, transform: str) -> str | None:
    """What is wrong with a model's raw answer ``out`` (flat) to ``rows()``, or None. ``kind``:
    the card's for the model ("quantile", "history", "linear", ...; None when it says none)."""
    checked = out[1:] if kind == "history" else out
    if out.shape != (2,) or not np.all(np.isfinite(checked)):
        return f"probe gave {out!r}, not finite values"
    lowest = float(checked.min())
    if lowest < -NEGATIVE_TOLERANCE and kind not in _EXTRAPOLATING:
        return f"probe gave {lowest:.6g}: negative ({transform}: no job's value is below 0)"
    return None


class ProbeError(Exception):
    """A model that failed the probe; the message names it and the problem."""


def check_batch(models: Iterable[tuple[str, object, Run]], transform: str) -> None:
    """Every model's answer to ``rows()`` as a batch must pass ``problem``; ProbeError otherwise.
    ``models``: (name, kind, run) each."""
    batch = rows()
    for name, kind, run in models:
        try:
            out = np.asarray(run(batch)).reshape(-1)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ProbeError(f"{name}: probe run failed: {exc}") from exc
        why = problem(out, kind, transform)
        if why is not None:
            raise ProbeError(f"{name}: {why}")


def check_one_row(paths: Iterable[tuple[str, Answer]]) -> None:
    """The plain probe row alone through each serving path (label, answer) must give finite values:
    a model whose batch of two runs may still fail one row. ProbeError otherwise."""
    row = rows()[1:]
    for label, answer in paths:
        try:
            values = answer(row)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ProbeError(f"{label}: one-row probe run failed: {exc}") from exc
        if not all(math.isfinite(v) for v in values):
            raise ProbeError(f"{label}: one-row probe gave {values}, not finite")
