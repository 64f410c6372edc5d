"""HARP's own model family as a baseline: linear regression, a decision tree and a small MLP on the
request features (learning.sklearn_models, the models `harp train` fits), then HARP's adjustment factor.

Each model learns the log of the target (run time, peak memory or used CPUs span several orders
of magnitude) from the training jobs known when validation opens; censored jobs enter with their
observed value, as in HARP, which did not model censoring. The adjustment factor multiplies every
prediction; it is the smallest that meets the kill budget on the validation window. Limits are
capped at the request. Features: core.features.vectorize on the requests alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from slurm_harp.core.features import vectorize
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.evaluation.baselines import cap_at_request
from slurm_harp.evaluation.frontier import Curve, pareto_points, smallest_multiplier
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.split import known_before
from slurm_harp.evaluation.strategy import Split
from slurm_harp.learning import sklearn_models
from slurm_harp.learning.sklearn_models import KINDS, Kind

MIN_TRAIN_JOBS = 50
_LOG_CAP = 40.0  # exp(40) is far above any request: keeps a wild prediction finite


class HarpStyleStrategy:
    """One of HARP's regressors on request features, scaled by its adjustment factor."""

    def __init__(self, target: Target, kind: Kind, seed: int = 0) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown model kind {kind!r}, expected one of {KINDS}")
        self.name = f"harp-{kind}"
        self.target = target
        self.kind = kind
        self.seed = seed
        self.factor = 1.0
        self._model: Any = None

    def fit(self, jobs: Sequence[JobRecord], split: Split, kill_budget: float) -> None:
        """Fit on the known training jobs; choose the factor on the validation window.

        Raises ValueError when fewer than MIN_TRAIN_JOBS training jobs have the target observed.
        """
        index = known_before(jobs, split.train_end)
        train = [jobs[i] for i in index]
        actual = observe(train, self.target).actual
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(actual) & (actual > 0)
        if int(ok.sum()) < MIN_TRAIN_JOBS:
            raise ValueError(
                f"{int(ok.sum())} training jobs with an observed {self.target}, need {MIN_TRAIN_JOBS}"
            )
        x = vectorize([job.request for job, keep in zip(train, ok, strict=True) if keep])
        self._model = sklearn_models.fit(self.kind, x, np.log(actual[ok]), self.seed)
        window = jobs[split.train_end : split.validation_end]
        self.factor = 1.0
        self.factor = smallest_multiplier(self._predict(window), observe(window, self.target), kill_budget)

    def _predict(self, jobs: Sequence[JobRecord]) -> np.ndarray:
        """Unscaled predictions in the target's unit."""
        if self._model is None:
            raise RuntimeError(f"{self.name}: limits() before fit()")
        if not jobs:
            return np.empty(0)
        log_pred = np.asarray(self._model.predict(vectorize([j.request for j in jobs])), dtype=np.float64)
        out: np.ndarray = np.exp(np.minimum(log_pred, _LOG_CAP))
        return out

    def limits(self, jobs: Sequence[JobRecord], start: int) -> np.ndarray:
        tail = jobs[start:]
        return cap_at_request(self.factor * self._predict(tail), observe(tail, self.target).requested)

    def knob(self) -> dict[str, float]:
        return {"factor": self.factor}

    def pareto(self, jobs: Sequence[JobRecord], start: int) -> Curve:
        tail = jobs[start:]
        return pareto_points(self._predict(tail), observe(tail, self.target))
