"""Asymmetric losses for gradient boosting, all right-censoring aware, as (gradient, hessian).

Residuals live in model space (log1p of the target): ``pred`` and ``label`` are arrays of it.
A censored label is a lower bound (the job was stopped at a limit: its true value is at least
the label), so a censored row costs nothing once the prediction reaches its label: only the
under-prediction side of each loss applies to it (one-sided loss). Dropping such rows would
hide exactly the jobs that run longest; reading the label as the true value biases low.

- pinball (quantile ``tau``): tau x (y - p) under, (1 - tau) x (p - y) over.
- asymmetric Huber (HARP): Huber with weight ``under`` (0.9) when p < y and ``over`` (0.1) above;
  quadratic within ``delta`` of the label, linear beyond.
- E-Loss style: pinball whose under-prediction side is scaled per row by the job's cost
  (cores x requested time, normalised to mean 1): killing a big job costs more.

Each loss also has a value function (for tests and reports). Hessians are positive constants
where the true one is zero (pinball, the linear part of Huber): boosting then takes bounded
gradient steps, the usual practice for these losses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Gradients = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Pinball:
    tau: float

    def gradients(self, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> Gradients:
        under = pred < label
        grad = np.where(under, -self.tau, 1.0 - self.tau)
        grad[censored & ~under] = 0.0
        return grad, np.ones_like(grad)

    def value(self, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> np.ndarray:
        e = label - pred
        loss = np.where(e > 0, self.tau * e, (self.tau - 1.0) * e)
        loss[censored & (e <= 0)] = 0.0
        out: np.ndarray = loss
        return out


@dataclass(frozen=True)
class AsymmetricHuber:
    under: float = 0.9
    over: float = 0.1
    delta: float = 0.5  # in log space: about a factor 1.65

    def gradients(self, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> Gradients:
        e = pred - label  # > 0: over-prediction
        w = np.where(e < 0, self.under, self.over)
        grad = w * np.clip(e, -self.delta, self.delta)
        hess = w.copy()
        over = e >= 0
        grad[censored & over] = 0.0
        hess[censored & over] = self.over  # keep the Newton step finite for all-censored leaves
        return grad, hess

    def value(self, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> np.ndarray:
        e = pred - label
        a = np.abs(e)
        huber = np.where(a <= self.delta, 0.5 * e * e, self.delta * (a - 0.5 * self.delta))
        loss = np.where(e < 0, self.under, self.over) * huber
        loss[censored & (e >= 0)] = 0.0
        out: np.ndarray = loss
        return out


@dataclass(frozen=True)
class CostWeightedPinball:
    """E-Loss style: under-prediction of row i weighs tau x cost_i (cost normalised to mean 1)."""

    tau: float
    cost: np.ndarray

    def _under_weight(self) -> np.ndarray:
        mean = float(np.mean(self.cost)) if self.cost.size else 1.0
        scaled: np.ndarray = self.tau * self.cost / (mean if mean > 0 else 1.0)
        return scaled

    def gradients(self, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> Gradients:
        under = pred < label
        grad = np.where(under, -self._under_weight(), 1.0 - self.tau)
        grad[censored & ~under] = 0.0
        return grad, np.ones_like(grad)

    def value(self, pred: np.ndarray, label: np.ndarray, censored: np.ndarray) -> np.ndarray:
        e = label - pred
        loss = np.where(e > 0, self._under_weight() * e, (self.tau - 1.0) * e)
        loss[censored & (e <= 0)] = 0.0
        out: np.ndarray = loss
        return out


Loss = Pinball | AsymmetricHuber | CostWeightedPinball
Objective = Callable[[np.ndarray, object], Gradients]


def lightgbm_objective(loss: Loss, censored: np.ndarray) -> Objective:
    """A LightGBM custom objective for ``loss``; ``censored`` is aligned with the training rows."""
    flags = np.asarray(censored, dtype=bool)

    def objective(pred: np.ndarray, data: object) -> Gradients:
        label = np.asarray(data.get_label(), dtype=np.float64)  # type: ignore[attr-defined]
        return loss.gradients(np.asarray(pred, dtype=np.float64), label, flags)

    return objective
