"""``HarpStrategy``: our method under `harp evaluate`'s protocol (evaluation.strategy.Strategy).

fit: features (request + causal history, learning.dataset) for the whole job list; the model
family learns from the training jobs whose outcome was known when validation opened; the
selection policy and the safety rule's calibration (kill budget) see the validation window only.
limits: the calibrated rule (core.safety_rule.ladder_limits) for jobs[start:], NaN = keep the
request. pareto: the rule's (newly killed %, waste cut %) as its penalty sweeps, on jobs[start:].

Refit (learning.fitting.Refit, default FULL): once the rule is calibrated, the models are
brought up to date with every job known when the test window opens, and jobs from there on are
predicted by those. This is what the nightly retraining does in production: the model serving a
job is never older than the one the rule was calibrated with was on validation. Validation jobs
are always predicted by the models fitted on the training window only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.history import HISTORY_FEATURE_NAMES, USER_JOBS
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import ladder_limits
from slurm_harp.evaluation.split import known_before
from slurm_harp.evaluation.strategy import Split
from slurm_harp.learning.calibration import Curve, frontier
from slurm_harp.learning.dataset import build_dataset, row_order
from slurm_harp.learning.family import quantile_name
from slurm_harp.learning.fitting import (
    Fitted,
    MethodConfig,
    Refit,
    fit_and_calibrate,
    predict_units,
    refreshed,
)
from slurm_harp.learning.member import Member
from slurm_harp.learning.targets import TargetData, target_data

MIN_TRAIN_JOBS = 50
# The feature is_cold reads: how many of the user's jobs ended within the history horizon.
_USER_JOBS_COLUMN = FEATURE_NAMES.index(HISTORY_FEATURE_NAMES[USER_JOBS])


class HarpStrategy:
    """Asymmetric-loss models, WTM choice and the calibrated per-job safety rule."""

    def __init__(
        self,
        target: Target,
        config: MethodConfig | None = None,
        floor: float = 1.0,
        refit: Refit | str = Refit.FULL,
        trees: int | None = None,
        learning_rate: float | None = None,
        ladder_rows: int | None = None,
        calibrate_by: str | None = None,
        **options: Any,
    ) -> None:
        """``options`` override MethodConfig fields (e.g. ``ladder_margins=(1.0, 1.2)``);
        ``floor`` is the smallest limit the rule proposes (default: Slurm's one unit);
        ``refit``: see the module documentation; ``trees``, ``learning_rate``, ``ladder_rows``:
        the boosters' and the ladder's (None: the family's own), as `harp train --trees
        --learning-rate --ladder-rows`; ``calibrate_by``: "partition" for a risk per rung and
        partition, as `--calibrate-by` (None: the config's)."""
        self.name = "ours"
        self.target = Target(target)
        base = config or MethodConfig()
        base = replace(base, **options) if options else base
        if trees is not None or learning_rate is not None:
            params = base.family.params
            family = base.family.boosted(trees or params.n_estimators, learning_rate or params.learning_rate)
            base = replace(base, family=family)
        if ladder_rows is not None:
            base = replace(base, family=replace(base.family, ladder_max_rows=ladder_rows))
        if calibrate_by is not None:
            base = replace(base, calibration=replace(base.calibration, by=calibrate_by))
        self.config = base
        self.floor = floor
        self.refit = Refit(refit)
        self.fitted: Fitted | None = None
        self._later: tuple[int, dict[str, Member]] | None = None  # (first job index, refitted models)
        self._memo: tuple[Sequence[JobRecord], np.ndarray, TargetData, np.ndarray] | None = None

    def _features(self, jobs: Sequence[JobRecord]) -> tuple[np.ndarray, TargetData, np.ndarray]:
        """(x, target data, row of each job or -1) for ``jobs``; one sweep per job list."""
        if self._memo is None or self._memo[0] is not jobs:
            data = build_dataset(jobs)
            td = target_data(jobs, data, self.target)
            # By index: a row is a copy of its job (as submitted), not the job itself.
            rows = np.full(len(jobs), -1, dtype=np.int64)
            order = row_order(jobs)
            rows[order] = np.arange(len(order))
            self._memo = (jobs, data.x, td, rows)
        return self._memo[1], self._memo[2], self._memo[3]

    def share_features(self, other: HarpStrategy) -> None:
        """Take ``other``'s features of its job list (they depend on the jobs alone, not on a fit):
        a fit per period along one trace then builds them once, not once per period."""
        self._memo = other._memo

    def fit(
        self, jobs: Sequence[JobRecord], split: Split, kill_budget: float, *, known_only: bool = False
    ) -> None:
        """As Strategy.fit; ``known_only``: validate only on the jobs that had ended when jobs[
        split.validation_end] was submitted, as `harp train` on harvested jobs does. `harp evaluate`
        calibrates on the whole validation window, as it does every baseline: the outcomes of the
        jobs still running when the test window opens are read off the trace (18 of 5,693
        validation jobs, 0.3 %, on the bundled KTH-SP2 trace), kept so its figures stay comparable."""
        x, td, rows = self._features(jobs)
        train = _rows(rows, known_before(jobs, split.train_end))
        if int(td.labelled()[train].sum()) < MIN_TRAIN_JOBS:
            raise ValueError(
                f"fewer than {MIN_TRAIN_JOBS} training jobs with an observed {self.target.value}"
            )
        window = np.arange(split.train_end, split.validation_end)
        if known_only:
            window = np.intersect1d(window, known_before(jobs, split.validation_end))
        validation = _rows(rows, window)
        calibration = replace(self.config.calibration, kill_budget=kill_budget, floor=self.floor)
        self.fitted = fit_and_calibrate(
            x, td, train, validation, replace(self.config, calibration=calibration)
        )
        self._later = None
        if self.refit is not Refit.OFF and split.validation_end < len(jobs):
            known = _rows(rows, known_before(jobs, split.validation_end))
            served = refreshed(self.fitted, self.refit, x, td, known, train, self.config)
            self._later = (split.validation_end, served.members)

    def _predictions(
        self, jobs: Sequence[JobRecord], start: int, end: int | None = None, names: Sequence[str] = ()
    ) -> tuple[Fitted, dict[str, np.ndarray], TargetData, np.ndarray]:
        """(fitted, predictions of the named members (default: the rule's) for the jobs of
        jobs[start:end] that have a row, their target data, which jobs do)."""
        fitted = self.fitted
        if fitted is None:
            raise RuntimeError("limits() before fit()")
        x, td, rows = self._features(jobs)
        tail = rows[start:end]
        have = tail >= 0
        names = tuple(names) or fitted.calibration.models
        boundary, later = self._later if self._later is not None else (len(jobs), fitted.members)
        cut = int(np.sum(have[: max(0, boundary - start)]))  # rows before the refitted models take over
        picked = tail[have]
        early = predict_units(fitted.members, names, x[picked[:cut]], td)
        late = predict_units(later, names, x[picked[cut:]], td)
        preds = {name: np.concatenate([early[name], late[name]]) for name in names}
        return fitted, preds, td.take(picked), have

    def limits(self, jobs: Sequence[JobRecord], start: int) -> np.ndarray:
        fitted, preds, td, have = self._predictions(jobs, start)
        out = np.full(have.shape[0], np.nan)  # no rungs: NaN everywhere
        out[have] = ladder_limits(preds, td.requested, td.weight, fitted.calibration, td.group)
        return out

    def quantile_limits(self, jobs: Sequence[JobRecord], start: int, quantile: float) -> np.ndarray:
        """The published ``quantile`` model's predictions for jobs[start:] in the target's unit,
        capped at the request (NaN where a job has no row): what the daemon serves with
        ``policy.limits = "quantile"``."""
        name = quantile_name(quantile)
        _, preds, td, have = self._predictions(jobs, start, names=(name,))
        out = np.full(have.shape[0], np.nan)
        out[have] = np.minimum(preds[name], td.requested)
        return out

    def cold(self, jobs: Sequence[JobRecord]) -> np.ndarray:
        """Per job: no job of its user had ended within the history horizon when it was submitted
        (core.history.is_cold, what the daemon's policy.require_history keeps the request of);
        False for a job without a row. Needs no fit."""
        x, _, rows = self._features(jobs)
        out = np.zeros(rows.shape[0], dtype=bool)
        have = rows >= 0
        out[have] = ~(x[rows[have], _USER_JOBS_COLUMN] > 0.0)
        return out

    def pareto(self, jobs: Sequence[JobRecord], start: int) -> Curve:
        fitted, preds, td, _ = self._predictions(jobs, start)
        if not fitted.calibration.rungs:
            return [(0.0, 0.0)]
        return frontier(preds, td, fitted.calibration)

    def knob(self) -> dict[str, float]:
        if self.fitted is None:
            return {}
        cal = self.fitted.calibration
        knob = {"penalty": cal.penalty, "rungs": float(len(cal.rungs))}
        if self.config.calibration.by != "none":  # how many partitions have risks of their own
            knob["partitions"] = float(len(cal.group_risks))
        return knob


def _rows(rows: np.ndarray, jobs: np.ndarray) -> np.ndarray:
    """Dataset rows of the given job indices, jobs without a row left out."""
    picked = rows[jobs]
    out: np.ndarray = picked[picked >= 0]
    return out
