"""The guard's lead against the shortest time limit harp sets, where a mode relies on the guard.

In time_min and extend modes a job may run with a limit cut to its prediction, and only `harp guard`
extending it keeps Slurm from killing it there, before its user's own limit. The guard extends a job
at a poll that finds less than ``guard.lead_seconds`` left of its limit; a lead of at least twice
``guard.poll_seconds`` puts a poll in that window of every limit at least a lead long. A limit
shorter than the lead is due from the job's start, and its window is the limit alone: with
``poll_seconds = 900`` and ``lead_seconds = 1800`` a job cut to the default floor of 10 minutes timed
out at 600 s, before the guard's first poll, while check-config said ok. So the shortest limit harp
sets (``policy.floor.time_minutes``, in whole minutes and at least one: Policy.proposed) must be at
least the lead.

The check reads one file: the role gives the daemon and the guard the same harp.toml. A guard started
with a file of its own (`harp guard --config other.toml`) is checked against the floor in that file,
which the daemon does not read; keep [policy] and [guard] in the one file both read.
"""

from __future__ import annotations

import math

from slurm_harp.config.reader import Reader
from slurm_harp.config.settings import Settings
from slurm_harp.core.policy import Policy
from slurm_harp.core.request import Target


def check_guard_lead(r: Reader, settings: Settings) -> None:
    """Refuse a guard whose lead is longer than the shortest time limit harp sets in a mode that
    relies on the guard, naming both keys, their values and what to change."""
    policy, guard = settings.policy, settings.guard
    mode_key = guarded_mode_key(policy)
    if mode_key is None:
        return
    shortest_s = 60 * policy.proposed(Target.TIME, 0.0)  # the floor as a limit is set: Policy.proposed
    if shortest_s >= guard.lead_seconds:
        return
    floor = policy.floors.get(Target.TIME, 0.0)
    rounded = "" if shortest_s == 60 * floor else ", in whole minutes and at least 1"
    raise r.fail(
        "guard.lead_seconds",
        f"{guard.lead_seconds:g} s is longer than the shortest time limit harp sets, {shortest_s} s "
        f"(policy.floor.time_minutes = {floor:g}{rounded}), with {mode_key}, which only the guard keeps "
        "from killing a job before its user's limit: a job cut to that limit is due from its start and "
        f"could time out before the guard's next poll (guard.poll_seconds = {guard.poll_seconds:g}); "
        f"set policy.floor.time_minutes to at least {math.ceil(guard.lead_seconds / 60)}, or "
        f"guard.lead_seconds to at most {shortest_s} (and guard.poll_seconds to at most half of it)",
    )


def guarded_mode_key(policy: Policy) -> str | None:
    """The first key giving a mode that relies on the guard, with its value; None where none does."""
    if policy.default_mode.needs_guard:
        return f"policy.mode = {policy.default_mode.value!r}"
    for i, rule in enumerate(policy.rules):
        if rule.mode.needs_guard:
            return f"policy.rule[{i}].mode = {rule.mode.value!r}"
    return None
