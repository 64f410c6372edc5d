"""The daemon's answer for one submission, independent of any transport."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from slurm_harp.core.request import Target


class Action(StrEnum):
    NONE = "none"
    ANNOTATE = "annotate"
    REWRITE = "rewrite"  # lower the target's limit to new_value
    SET_TIME_MIN = "set_time_min"  # time only: set the job's time_min to new_value, keep its limit


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
    GUARD_DOWN = "guard_down"  # extend/time_min asked, but `harp guard` is not running: annotated
    OPTED_OUT = "opted_out"  # the site keeps this user or account out of harp


@dataclass(frozen=True, slots=True)
class TargetDecision:
    target: Target
    action: Action
    reason: Reason = Reason.UNSPECIFIED
    predicted: float | None = None  # in the target's unit, at `quantile`
    quantile: float | None = None
    new_value: int | None = None  # only for Action.REWRITE and Action.SET_TIME_MIN
    model_version: str = ""
    detail: str = ""
    # Shadow mode only: a changing mode would have kept the request (the calibrated rule finds no
    # gain worth the risk, or the user is cold), so the tag says so beside the prediction.
    kept: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    targets: tuple[TargetDecision, ...] = field(default_factory=tuple)
    user_message: str = ""
    annotation: str = ""
    mode: str = "off"
