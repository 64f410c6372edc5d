"""The transport-neutral core: JobRequest -> features -> models -> policy -> Decision."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from slurm_harp.core.decision import Action, Decision, Reason, TargetDecision
from slurm_harp.core.message import annotation_for, user_message_for
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.request import JobRequest, Target

log = logging.getLogger(__name__)


class QuantilePredictor(Protocol):
    """What the core needs of a model (satisfied by model.runtime.QuantileModel)."""

    @property
    def version(self) -> str: ...

    @property
    def quantiles(self) -> tuple[float, ...]: ...

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray: ...


Vectorizer = Callable[[Sequence[JobRequest]], np.ndarray]
TARGETS: tuple[Target, ...] = (Target.TIME, Target.MEMORY, Target.CPUS)


class Predictor:
    """Answers one decision per request. Models and policy are swapped atomically on reload."""

    def __init__(
        self,
        policy: Policy,
        vectorize: Vectorizer,
        models: Mapping[Target, QuantilePredictor] | None = None,
    ) -> None:
        self._vectorize = vectorize
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

    def decide(self, request: JobRequest) -> Decision:
        policy, models = self._state
        mode = policy.mode_for(request)
        features: np.ndarray | None = None
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
                    features = self._vectorize([request])
                quantile = _closest(model.quantiles, policy.quantile)
                predicted = float(model.predict_quantile(features, quantile)[0])
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
            outcomes.append(policy.decide(target, request, mode, predicted, quantile, model.version))
        targets = tuple(outcomes)
        return Decision(
            targets=targets,
            user_message=user_message_for(request, targets),
            annotation=annotation_for(mode, targets),
            mode=mode.value,
        )


def _closest(available: tuple[float, ...], wanted: float) -> float:
    """The model's quantile nearest to the policy's, preferring the safer (higher) one on ties."""
    return min(available, key=lambda q: (abs(q - wanted), -q))
