"""What users and admins read: the one-line sbatch message and the admin_comment tag."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_harp.core.decision import Action, TargetDecision
from slurm_harp.core.policy import Mode
from slurm_harp.core.request import JobRequest, Target

TAG_PREFIX = "harp:"
_UNIT = {Target.TIME: "min", Target.MEMORY: "MB", Target.CPUS: "cpus"}
_KEY = {Target.TIME: "t", Target.MEMORY: "m", Target.CPUS: "c"}


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
    return f"{value:g} {_UNIT[target]}"


def user_message_for(request: JobRequest, targets: Sequence[TargetDecision]) -> str:
    """One line for sbatch's output, only when something was rewritten."""
    changes = []
    for t in targets:
        if t.action is Action.REWRITE and t.new_value is not None:
            asked = request.requested(t.target)
            was = "" if asked is None else f" from {_describe(t.target, asked)}"
            changes.append(f"{t.target.value}{was} to {_describe(t.target, t.new_value)}")
    if not changes:
        return ""
    quantile = next((t.quantile for t in targets if t.action is Action.REWRITE and t.quantile), None)
    basis = (
        f" ({quantile:.0%} of similar past jobs finished within it)"
        if quantile
        else " (calibrated on similar past jobs)"
    )
    return "harp: lowered " + ", ".join(changes) + basis + "."


def annotation_for(mode: Mode, targets: Sequence[TargetDecision]) -> str:
    """A compact tag without spaces, e.g. ``harp:shadow,t=45/q0.9,v=time@2026...``."""
    parts = []
    for t in targets:
        if t.predicted is None or t.action is Action.NONE:
            continue
        value = t.new_value if t.new_value is not None else round(t.predicted)
        flag = "!" if t.action is Action.REWRITE else ""
        quantile = f"/q{t.quantile:g}" if t.quantile is not None else ""
        parts.append(f"{_KEY[t.target]}{flag}={value}{quantile}")
    if not parts:
        return ""
    versions = sorted({t.model_version for t in targets if t.model_version and t.predicted is not None})
    parts.append("v=" + "+".join(v.replace(",", "_").replace(" ", "_") for v in versions))
    return TAG_PREFIX + mode.value + "," + ",".join(parts)
