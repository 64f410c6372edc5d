"""The daemon's answer for one submission, independent of any transport."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from slurm_harp.core.request import Target


class Action(StrEnum):
    NONE = "none"
    ANNOTATE = "annotate"
    REWRITE = "rewrite"


class Reason(StrEnum):
    """Why a target was not rewritten. UNSPECIFIED when it was."""

    UNSPECIFIED = "unspecified"
    NO_MODEL = "no_model"
    COLD_USER = "cold_user"
    POLICY_OFF = "policy_off"
    SHADOW = "shadow"
    NOT_REQUESTED = "not_requested"
    NO_GAIN = "no_gain"
    BAD_REQUEST = "bad_request"
    MODEL_ERROR = "model_error"


@dataclass(frozen=True, slots=True)
class TargetDecision:
    target: Target
    action: Action
    reason: Reason = Reason.UNSPECIFIED
    predicted: float | None = None  # in the target's unit, at `quantile`
    quantile: float | None = None
    new_value: int | None = None  # only for Action.REWRITE
    model_version: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    targets: tuple[TargetDecision, ...] = field(default_factory=tuple)
    user_message: str = ""
    annotation: str = ""
    mode: str = "off"
