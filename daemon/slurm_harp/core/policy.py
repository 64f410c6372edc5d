"""Site policy: which mode applies to a job and what a prediction may do to its request.

Two invariants hold for every rewrite, whatever the model says: the new value is never above
what the user asked, and never below the configured floor (tests/unit/test_policy.py checks both
for every target and changing mode; an ask of 2**53 units or more counts as not given).

Modes, from the least to the most change (docs/configuration.md):
- off: nothing; shadow: predict and annotate only;
- time_min: the job keeps its time limit; its time_min is set to the prediction, so Slurm's
  backfill may start it sooner with a limit cut toward it, and `harp guard` extends it again;
- extend: the time limit is cut to the prediction and `harp guard` extends it while the job runs,
  never past the user's own request;
- rewrite: every target is lowered to the prediction, and a job that needs more is killed at it.
In time_min and extend modes only the time limit changes (memory and CPUs cannot be given back
to a running job): the other targets are annotated. Both need a live guard (Predictor).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np

from slurm_harp.core.decision import Action, Reason, TargetDecision
from slurm_harp.core.request import JobRequest, Target


class Mode(StrEnum):
    """Declared from the least change to the most (MODES_BY_CHANGE)."""

    OFF = "off"
    SHADOW = "shadow"  # predict and annotate; never change the job
    TIME_MIN = "time_min"
    EXTEND = "extend"
    REWRITE = "rewrite"

    @property
    def changes_limits(self) -> bool:
        return self in (Mode.TIME_MIN, Mode.EXTEND, Mode.REWRITE)

    @property
    def needs_guard(self) -> bool:
        """Whether jobs in this mode may run with a limit below their request, so that only
        `harp guard` extending them keeps them from being killed before it."""
        return self in (Mode.TIME_MIN, Mode.EXTEND)


MODES_BY_CHANGE: tuple[Mode, ...] = tuple(Mode)


@dataclass(frozen=True, slots=True)
class Rule:
    """A mode for jobs matching a partition and/or account (None matches anything)."""

    mode: Mode
    partition: str | None = None
    account: str | None = None

    def matches(self, partition: str | None, account: str | None) -> bool:
        return (self.partition is None or self.partition == partition) and (
            self.account is None or self.account == account
        )


# How a limit is chosen when a model card carries a calibrated rule (see Policy.limits).
LIMITS: tuple[str, ...] = ("calibrated", "quantile")

DEFAULT_FLOORS: Mapping[Target, float] = {Target.TIME: 10.0, Target.MEMORY: 1024.0, Target.CPUS: 1.0}


@dataclass(frozen=True, slots=True)
class Policy:
    default_mode: Mode = Mode.SHADOW
    rules: tuple[Rule, ...] = ()
    quantile: float = 0.9
    # Rewrite only when the new value saves at least this fraction of the request.
    min_gain: float = 0.1
    floors: Mapping[Target, float] = field(default_factory=lambda: dict(DEFAULT_FLOORS))
    # With a job history configured, never rewrite for a user with no recently ended job (annotate).
    require_history: bool = True
    # "calibrated": a model card's calibrated rule decides when it has one (core.safety_rule);
    # "quantile": always the `quantile` model, lowered when it saves min_gain.
    limits: str = "calibrated"
    # Users and accounts the site keeps out of harp entirely (their jobs pass unchanged).
    opt_out_users: frozenset[str] = frozenset()
    opt_out_accounts: frozenset[str] = frozenset()

    @property
    def needs_guard(self) -> bool:
        """Whether some job may get a mode that needs `harp guard` (the default mode or a rule's)."""
        return self.default_mode.needs_guard or any(rule.mode.needs_guard for rule in self.rules)

    def opted_out(self, request: JobRequest) -> bool:
        """The site keeps the job's user or account out. A job whose user has no name (slurmctld
        could not resolve the uid: an NSS outage) is kept out while any user is: it may be theirs."""
        if self.opt_out_users and (request.user_name is None or request.user_name in self.opt_out_users):
            return True
        return request.account is not None and request.account in self.opt_out_accounts

    def mode_for(self, request: JobRequest) -> Mode:
        """First matching rule wins; otherwise the default mode. A job that may run in several
        partitions (``-p a,b``) gets the least changing of their modes: Slurm may start it in any."""
        if not self.rules:
            return self.default_mode
        partition = request.partition
        if partition is None or "," not in partition:  # one partition: no list to go through
            return self._mode_in(partition or None, request.account)
        modes = (self._mode_in(p or None, request.account) for p in partition.split(","))
        return min(modes, key=MODES_BY_CHANGE.index)

    def _mode_in(self, partition: str | None, account: str | None) -> Mode:
        for rule in self.rules:
            if rule.matches(partition, account):
                return rule.mode
        return self.default_mode

    def proposed(self, target: Target, predicted: float) -> int:
        """A prediction (in the target's unit) as the value harp would set: whole units, rounded
        up, at least the target's floor and at least 1, whatever the floor: 0 is no limit Slurm
        takes as one (`--mem=0` is all of a node's memory), and the plugin sets no such value."""
        return max(math.ceil(predicted), math.ceil(self.floors.get(target, 0.0)), 1)

    def saves(self, proposed: float, asked: float) -> bool:
        """Whether setting ``proposed`` saves at least ``min_gain`` of the ``asked`` value, and
        anything at all (with min_gain 0, the ask itself was a "rewrite" to what it was)."""
        return proposed < asked and proposed <= asked * (1.0 - self.min_gain)

    def new_value(self, target: Target, predicted: float, asked: float) -> int | None:
        """The value a changing mode sets for a prediction (in the target's unit) of a job that
        asked ``asked``: ``proposed``, when it ``saves``; None keeps the ask."""
        proposed = self.proposed(target, predicted)
        if not self.saves(proposed, asked):
            return None
        # An ask is below EXACT_REQUESTS (JobRequest.requested): its float rounds to no integer
        # above it, so this is never above what the user asked.
        return int(min(proposed, asked))

    def new_values(self, target: Target, predicted: np.ndarray, asked: np.ndarray) -> np.ndarray:
        """``new_value`` for many jobs (float array, NaN where the ask is kept): what the daemon
        would set for each, for judging a model version (learning.promotion). A prediction that is
        not finite keeps the ask, as the daemon keeps it (a model error); so does an ask that is
        not positive (none given)."""
        out = np.full(len(asked), np.nan)
        for i, (value, ask) in enumerate(zip(predicted.tolist(), asked.tolist(), strict=True)):
            if math.isfinite(value) and ask > 0:
                new = self.new_value(target, value, ask)
                out[i] = np.nan if new is None else new
        return out

    def decide(
        self,
        target: Target,
        request: JobRequest,
        mode: Mode,
        predicted: float,
        quantile: float | None,
        model_version: str,
    ) -> TargetDecision:
        """Turn a prediction (in the target's unit) into an action under ``mode``."""
        base = TargetDecision(
            target=target,
            action=Action.NONE,
            predicted=predicted,
            quantile=quantile,
            model_version=model_version,
        )
        if mode is Mode.OFF:
            return replace(base, reason=Reason.POLICY_OFF)
        if mode is Mode.SHADOW:
            return replace(base, action=Action.ANNOTATE, reason=Reason.SHADOW)
        if mode.needs_guard and target is not Target.TIME:
            return replace(
                base, action=Action.ANNOTATE, reason=Reason.SHADOW, detail=f"only the time limit in {mode}"
            )
        asked = request.requested(target)
        if asked is None:
            # The user asked for no value: the partition's default applies, and harp leaves it to
            # Slurm. The default a request may carry (default_time_limit_minutes) is for features
            # and weights only: for a `-p a,b` job it is the smallest of the partitions', not
            # necessarily the one Slurm gives, and the plugin leaves a job without a limit alone.
            return replace(base, action=Action.ANNOTATE, reason=Reason.NOT_REQUESTED)
        new_value = self.new_value(target, predicted, asked)
        if new_value is None:
            return replace(
                base,
                action=Action.ANNOTATE,
                reason=Reason.NO_GAIN,
                detail=f"proposed {self.proposed(target, predicted)} vs asked {asked:g}",
            )
        if mode is Mode.TIME_MIN:
            own = request.time_min_minutes
            if own is not None and own > 0:
                # The user said how short a start they accept: harp does not overrule it.
                return replace(
                    base, action=Action.ANNOTATE, reason=Reason.NO_GAIN, detail=f"user's time_min {own}"
                )
            return replace(base, action=Action.SET_TIME_MIN, new_value=new_value)
        return replace(base, action=Action.REWRITE, new_value=new_value)
