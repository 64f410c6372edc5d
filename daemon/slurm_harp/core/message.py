"""What users read: the one-line sbatch message of what harp changed to their job (what admins read
in its admin_comment is core.tag's)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_harp.core.decision import Action, TargetDecision
from slurm_harp.core.policy import Mode
from slurm_harp.core.request import JobRequest, Target

_UNIT = {Target.TIME: "min", Target.MEMORY: "MB", Target.CPUS: "cpus"}


def format_minutes(minutes: float) -> str:
    """Slurm's own [D-]HH:MM:SS spelling, so users recognise it."""
    total = round(minutes * 60)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    mins, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{mins:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def _describe(target: Target, value: float) -> str:
    if target is Target.TIME:
        return format_minutes(value)
    # Whole numbers whole ("g" gave a terabyte node's 1234567 MB as 1.23457e+06); a per-node average
    # of a job on several nodes to the hundredth, as the plugin writes it (notice.lua).
    return f"{round(value, 2):.16g} {_UNIT[target]}"


def _basis(quantile: float | None) -> str:
    """Why a cut, by the rule that made it: a quantile as a percentage (0.995 is 99.5%, not 100%)."""
    if quantile is None:
        return "calibrated on similar past jobs"
    # Hundredths of a per cent, rounded down: 0.99995 is no "100%" either.
    return f"{math.floor(round(quantile * 10000, 6)) / 100:g}% of similar past jobs finished within it"


def user_message_for(
    request: JobRequest, mode: Mode, targets: Sequence[TargetDecision], *, guard_down: bool = False
) -> str:
    """One line for sbatch's output: what harp changed, and what happens next."""
    time = next((t for t in targets if t.target is Target.TIME), None)
    asked = request.requested(Target.TIME)
    if time is not None and time.new_value is not None and asked is not None:
        new, own = format_minutes(time.new_value), format_minutes(asked)
        if time.action is Action.SET_TIME_MIN:
            return (
                f"harp: time_min set to {new}: the job may start sooner with a shorter limit, and is "
                f"extended up to your {own} while it runs if it needs it."
            )
        if time.action is Action.REWRITE and mode is Mode.EXTEND:
            return (
                f"harp: time limit set to {new} (you asked {own}); it is extended up to {own} while "
                "the job runs if it needs it."
            )
    if guard_down and time is not None and time.predicted is not None:
        return "harp: your limits are kept as asked (harp's extension guard is not running)."
    changes, bases = [], []
    for t in targets:
        if t.action is Action.REWRITE and t.new_value is not None:
            own_value = request.requested(t.target)
            was = "" if own_value is None else f" from {_describe(t.target, own_value)}"
            changes.append(f"{t.target.value}{was} to {_describe(t.target, t.new_value)}")
            bases.append(_basis(t.quantile or None))
    if not changes:
        return ""
    if len(set(bases)) == 1:
        return "harp: lowered " + ", ".join(changes) + f" ({bases[0]})."
    # Cuts by different rules (a target with a calibrated card beside one without): each its own.
    return "harp: lowered " + ", ".join(f"{c} ({b})" for c, b in zip(changes, bases, strict=True)) + "."
