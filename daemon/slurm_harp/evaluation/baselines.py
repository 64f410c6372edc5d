"""Baselines every evaluation prints next to ours: the user's request, and Tsafrir et al. (2007).

- ``request``: what Slurm does today (NaN everywhere: keep the request).
- ``tsafrir``: the mean of the user's last two observed values (run time, peak memory or used
  CPUs) among jobs that had ENDED before the submit time, capped at the request; a user with no
  ended job keeps the request.
- ``tsafrir-scaled``: the same times a multiplier, the smallest that meets the kill budget on the
  validation window, capped at the request.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.evaluation.frontier import Curve, pareto_points, smallest_multiplier
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.recent import recent_mean
from slurm_harp.evaluation.strategy import Split


def cap_at_request(limits: np.ndarray, requested: np.ndarray) -> np.ndarray:
    """Limits never above the request (where the request is known); NaN stays NaN."""
    with np.errstate(invalid="ignore"):
        capped: np.ndarray = np.where(limits > requested, requested, limits)
    return capped


class RequestStrategy:
    """The user's own request, unchanged."""

    def __init__(self, target: Target) -> None:
        self.name = "request"
        self.target = target

    def fit(self, jobs: Sequence[JobRecord], split: Split, kill_budget: float) -> None:
        """Nothing to learn."""

    def limits(self, jobs: Sequence[JobRecord], start: int) -> np.ndarray:
        return np.full(len(jobs) - start, np.nan)


class TsafrirStrategy:
    """Mean of the user's last two ended jobs, capped at the request."""

    def __init__(self, target: Target) -> None:
        self.name = "tsafrir"
        self.target = target
        self.multiplier = 1.0
        self._memo: tuple[Sequence[JobRecord], np.ndarray, np.ndarray] | None = None

    def _history(self, jobs: Sequence[JobRecord]) -> tuple[np.ndarray, np.ndarray]:
        """(unscaled prediction, request) for every job; one causal sweep per job list."""
        if self._memo is None or self._memo[0] is not jobs:
            obs = observe(jobs, self.target)
            self._memo = (jobs, recent_mean(jobs, obs.actual, depth=2), obs.requested)
        return self._memo[1], self._memo[2]

    def fit(self, jobs: Sequence[JobRecord], split: Split, kill_budget: float) -> None:
        """Nothing to learn: the history is read at prediction time."""

    def limits(self, jobs: Sequence[JobRecord], start: int) -> np.ndarray:
        base, requested = self._history(jobs)
        return cap_at_request(self.multiplier * base[start:], requested[start:])


class ScaledTsafrirStrategy(TsafrirStrategy):
    """Tsafrir times the smallest multiplier that meets the kill budget on validation."""

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.name = "tsafrir-scaled"

    def fit(self, jobs: Sequence[JobRecord], split: Split, kill_budget: float) -> None:
        base, _ = self._history(jobs)
        window = slice(split.train_end, split.validation_end)
        self.multiplier = smallest_multiplier(base[window], observe(jobs[window], self.target), kill_budget)

    def knob(self) -> dict[str, float]:
        return {"multiplier": self.multiplier}

    def pareto(self, jobs: Sequence[JobRecord], start: int) -> Curve:
        base, _ = self._history(jobs)
        return pareto_points(base[start:], observe(jobs[start:], self.target))
