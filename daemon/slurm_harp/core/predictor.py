"""The transport-neutral core: JobRequest -> features -> models -> policy -> Decision."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol, cast

import numpy as np

from slurm_harp.core.decision import Action, Decision, Reason, TargetDecision
from slurm_harp.core.history import is_cold
from slurm_harp.core.memory_default import MemoryDefaults
from slurm_harp.core.message import user_message_for
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.safety_rule import Calibration, decide_limit, decision_weight, viable_models
from slurm_harp.core.tag import annotation_for

log = logging.getLogger(__name__)


class QuantilePredictor(Protocol):
    """What the core needs of a model (satisfied by model.runtime.QuantileModel)."""

    @property
    def version(self) -> str: ...

    @property
    def quantiles(self) -> tuple[float, ...]: ...

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray: ...


class CalibratedPredictor(QuantilePredictor, Protocol):
    """A model whose card carries the calibrated safety rule (core.safety_rule)."""

    @property
    def calibration(self) -> Calibration | None: ...

    @property
    def chosen(self) -> str | None: ...

    @property
    def names(self) -> tuple[str, ...]: ...

    def predict_row(self, x: np.ndarray, names: tuple[str, ...]) -> dict[str, float]: ...


class Vectorizer(Protocol):
    """features.vectorize: requests (and their history rows, if any) -> feature rows."""

    def __call__(
        self, requests: Sequence[JobRequest], history: np.ndarray | None = None, /
    ) -> np.ndarray: ...


class HistorySource(Protocol):
    """Causal history of a new submission (satisfied by history.HistoryIndex and the daemon's feed)."""

    def row(self, request: JobRequest, at: int) -> np.ndarray: ...


class GuardStatus(Protocol):
    """Whether `harp guard` is alive now (satisfied by heartbeat.HeartbeatFile)."""

    def alive(self) -> bool: ...


TARGETS: tuple[Target, ...] = (Target.TIME, Target.MEMORY, Target.CPUS)


class NonFinitePrediction(ValueError):
    """A model answered NaN or an infinity: no limit can come of it (math.ceil raises on it)."""


class Predictor:
    """Answers one decision per request. Models and policy are swapped atomically on reload."""

    def __init__(
        self,
        policy: Policy,
        vectorize: Vectorizer,
        models: Mapping[Target, QuantilePredictor] | None = None,
        history: HistorySource | None = None,
        guard: GuardStatus | None = None,
    ) -> None:
        self._vectorize = vectorize
        self._history = history
        self._guard = guard
        # What slurmctld gives a job asking no memory (core.memory_default), filled into each
        # request as it is built (server.convert); the daemon's loop replaces it as scontrol shows
        # it. None known, such jobs have none.
        self.memory_defaults = MemoryDefaults()
        # One tuple, replaced as a whole: a request never sees a new policy with old models.
        self._state: tuple[Policy, Mapping[Target, QuantilePredictor]] = (policy, dict(models or {}))

    @property
    def policy(self) -> Policy:
        return self._state[0]

    @property
    def models(self) -> Mapping[Target, QuantilePredictor]:
        return self._state[1]

    def swap(
        self, policy: Policy | None = None, models: Mapping[Target, QuantilePredictor] | None = None
    ) -> None:
        old_policy, old_models = self._state
        self._state = (policy or old_policy, dict(models) if models is not None else old_models)

    def use_memory_defaults(self, defaults: MemoryDefaults) -> None:
        """What slurmctld gives a job asking no memory from now on (one reference, replaced whole)."""
        self.memory_defaults = defaults

    def decide(self, request: JobRequest) -> Decision:
        policy, models = self._state
        if policy.opted_out(request):
            return Decision(
                targets=tuple(TargetDecision(t, Action.NONE, Reason.OPTED_OUT) for t in TARGETS),
                mode=Mode.OFF.value,
            )
        mode = policy.mode_for(request)
        guard_down = mode.needs_guard and (self._guard is None or not self._guard.alive())
        if guard_down:
            # Without the guard a shortened job could be killed before its own limit: annotate only.
            mode = Mode.SHADOW
        features: np.ndarray | None = None
        cold = False
        outcomes: list[TargetDecision] = []
        for target in TARGETS:
            model = models.get(target)
            if model is None:
                outcomes.append(TargetDecision(target, Action.NONE, Reason.NO_MODEL, detail="no model"))
                continue
            if mode is Mode.OFF:
                outcomes.append(
                    TargetDecision(target, Action.NONE, Reason.POLICY_OFF, model_version=model.version)
                )
                continue
            try:
                if features is None:
                    features, cold = self._features(request)
                calibration = served_rule(model, policy)
                if calibration is not None:
                    predicted, keep = _calibrated(
                        cast(CalibratedPredictor, model), calibration, features, request
                    )
                    quantile = None
                else:
                    quantile = closest_quantile(model.quantiles, policy.quantile)
                    predicted, keep = float(model.predict_quantile(features, quantile)[0]), False
                if not math.isfinite(predicted):
                    raise NonFinitePrediction(f"{target.value} model predicted {predicted!r}")
            except Exception as exc:  # a broken model must never break the submission path
                log.exception("model %s failed for target %s", model.version, target.value)
                outcomes.append(
                    TargetDecision(
                        target,
                        Action.NONE,
                        Reason.MODEL_ERROR,
                        model_version=model.version,
                        detail=type(exc).__name__,
                    )
                )
                continue
            if mode is Mode.SHADOW and (keep or (cold and policy.require_history)):
                # What a changing mode would do, for the shadow report: keep the request.
                shadow = policy.decide(target, request, mode, predicted, quantile, model.version)
                outcomes.append(replace(shadow, kept=True))
                continue
            if cold and policy.require_history and mode.changes_limits:
                # Nothing of this user's to go on: say what the model thinks, change nothing.
                shadow = policy.decide(target, request, Mode.SHADOW, predicted, quantile, model.version)
                outcomes.append(replace(shadow, reason=Reason.COLD_USER))
                continue
            if keep and mode.changes_limits:
                # The calibrated rule finds the saving not worth the risk for this job.
                outcomes.append(
                    TargetDecision(
                        target,
                        Action.ANNOTATE,
                        Reason.NO_GAIN,
                        predicted=predicted,
                        model_version=model.version,
                        detail="calibrated rule keeps the request",
                    )
                )
                continue
            decided = policy.decide(target, request, mode, predicted, quantile, model.version)
            if guard_down and target is Target.TIME:
                decided = replace(decided, reason=Reason.GUARD_DOWN, detail="harp guard not running")
            outcomes.append(decided)
        targets = tuple(outcomes)
        return Decision(
            targets=targets,
            user_message=user_message_for(request, mode, targets, guard_down=guard_down),
            annotation=annotation_for(mode, targets, request),
            mode=mode.value,
        )

    def _features(self, request: JobRequest) -> tuple[np.ndarray, bool]:
        """The model input and whether the user is cold (only known with a history source)."""
        if self._history is None:
            return self._vectorize([request]), False
        at = request.submit_time if request.submit_time is not None else int(time.time())
        history = self._history.row(request, at)
        return self._vectorize([request], history[np.newaxis, :]), is_cold(history)


def _calibrated(
    model: CalibratedPredictor, calibration: Calibration, features: np.ndarray, request: JobRequest
) -> tuple[float, bool]:
    """(value to show or apply, whether the rule keeps the request) under the card's rule.

    The same decide_limit that training calibrated on validation: live decisions are the evaluated ones.
    """
    target = calibration.target
    asked, weight = request.requested(target), decision_weight(target, request)
    # Only the models that could win run (each is an ONNX session on the submission path); the
    # chosen model's prediction is what an annotation shows when the request is kept.
    names = viable_models(asked, weight, calibration, request.partition)
    shown = model.chosen if model.chosen in model.names else next(iter(names or calibration.models), None)
    wanted = names if shown is None or shown in names else (*names, shown)
    predictions = model.predict_row(features, wanted)
    limit = decide_limit(predictions, asked, weight, calibration, request.partition)
    if limit is not None:
        return limit, False
    return predictions.get(shown or "", float("nan")), True


def served_rule(model: QuantilePredictor, policy: Policy) -> Calibration | None:
    """The calibrated rule that sets ``model``'s limits under ``policy``; None: its quantile model
    nearest ``policy.quantile`` does (``closest_quantile``). Either's value then goes through
    Policy.new_value. The one answer for the daemon and for promotion's judging (learning.promotion)."""
    return getattr(model, "calibration", None) if policy.limits == "calibrated" else None


def closest_quantile(available: tuple[float, ...], wanted: float) -> float:
    """The model's quantile nearest to the policy's, preferring the safer (higher) one on ties."""
    return min(available, key=lambda q: (abs(q - wanted), -q))
