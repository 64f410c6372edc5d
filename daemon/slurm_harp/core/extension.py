"""How far a shortened job's time limit is extended while it runs (time_min and extend modes).

The scheduler plans with the prediction; the job is never killed before its user's own limit
("divorce the kill time from the prediction", Tsafrir, Etsion & Feitelson 2007). When a running
job's remaining time falls below the guard's lead time, its limit moves to the first of

    prediction + step,  step in STEPS (Tsafrir's correction offsets)

that leaves it at least the lead time from now, capped at the user's own request and at any bound
the site sets (a reservation on its nodes, a partition or QOS maximum). The steps grow roughly
geometrically, so a job that runs far past its prediction needs few extensions, and each step is
an offset from the ORIGINAL prediction, so an early extension stays small.

Pure functions in minutes and seconds: `harp guard` (guard/) applies them to live jobs, the
evaluation and the simulator to replayed ones, so the three extend alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The guard's default lead (config [guard] lead_seconds): the poll period, slurmctld's periodic limit
# check (about 30 s) and a slow scontrol, with room to spare.
DEFAULT_LEAD_S = 120.0
# Tsafrir et al. (2007): 1, 5, 15, 30 minutes, 1, 2, 5, 10, 20, 50, 100 hours after the prediction.
STEPS_MINUTES: tuple[int, ...] = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 3000, 6000)


@dataclass(frozen=True, slots=True)
class Extension:
    """A new limit for one job (minutes), and whether a site bound stopped it short of the step."""

    new_limit: int
    capped_by_bound: bool = False

    def reaches(self, request_minutes: int) -> bool:
        return self.new_limit >= request_minutes


def due(limit_minutes: int, elapsed_s: float, lead_s: float) -> bool:
    """Whether a job with ``limit_minutes`` that has run ``elapsed_s`` must be extended now."""
    return limit_minutes * 60.0 - elapsed_s <= lead_s


def next_limit(
    prediction_minutes: int,
    limit_minutes: int,
    request_minutes: int,
    elapsed_s: float,
    lead_s: float,
    bound_minutes: int | None = None,
    steps: tuple[int, ...] = STEPS_MINUTES,
) -> Extension | None:
    """The limit a job should have now, or None when it needs no extension or none is possible.

    ``prediction_minutes``: the limit harp first gave the job (the extend mode's limit, or the
    time_min it was started with); ``limit_minutes``: its current limit; ``request_minutes``: the
    user's own limit, never exceeded; ``bound_minutes``: the largest limit the site allows now
    (None: no bound). A job already at or above its request is left alone.
    """
    if limit_minutes >= request_minutes or not due(limit_minutes, elapsed_s, lead_s):
        return None
    return _step(prediction_minutes, limit_minutes, request_minutes, elapsed_s, lead_s, bound_minutes, steps)


def _step(
    prediction_minutes: int,
    limit_minutes: int,
    request_minutes: int,
    elapsed_s: float,
    lead_s: float,
    bound_minutes: int | None,
    steps: tuple[int, ...],
) -> Extension | None:
    # At least the lead time from now, and more than the job has.
    least = max(math.ceil((elapsed_s + lead_s) / 60.0), limit_minutes + 1)
    target = next((prediction_minutes + s for s in steps if prediction_minutes + s >= least), request_minutes)
    target = min(target, request_minutes)
    capped = bound_minutes is not None and target > bound_minutes
    if capped:
        target = bound_minutes  # type: ignore[assignment]
    if target <= limit_minutes:
        return None if not capped else Extension(limit_minutes, capped_by_bound=True)
    return Extension(target, capped_by_bound=capped)


def extensions_needed(
    prediction_minutes: int,
    run_s: float,
    request_minutes: int,
    lead_s: float,
    steps: tuple[int, ...] = STEPS_MINUTES,
) -> tuple[int, int]:
    """(extensions, final limit in minutes) for a job of run time ``run_s`` started with limit
    ``prediction_minutes`` and extended by ``next_limit`` whenever it falls due, with no site bound:
    what the evaluation and the simulator count. A job needing more than its request is stopped
    at the request, as it would have been without harp."""
    limit, count = min(prediction_minutes, request_minutes), 0
    while limit < request_minutes and limit * 60.0 - lead_s <= run_s:
        # The guard acts when the remaining time falls below the lead: at elapsed = limit - lead.
        elapsed = max(0.0, limit * 60.0 - lead_s)
        step = _step(prediction_minutes, limit, request_minutes, elapsed, lead_s, None, steps)
        if step is None:
            break
        limit, count = step.new_limit, count + 1
    return count, limit
