"""Where the limits the scheduler plans with come from.

Each source answers three things about a job: at submit, its ``Plan`` (the limit planned with while it
waits, the limit that kills it, and the shortest limit backfill may start it with); when a running
job reaches its planned limit before its kill limit, the new planned limit; and it hears when a job
ends (Tsafrir's predictions learn from ended jobs). The kill limit is fixed per attempt: the engine
ends a job at min(run time, kill limit), so a planned limit never kills anything by itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from slurm_harp.core.extension import STEPS_MINUTES, ConditionalRatios
from slurm_harp.simulation.workload import Workload

# Tsafrir, Etsion & Feitelson (2007): offsets from the original prediction at the k-th expiry, in
# seconds; the steps `harp guard` extends by (core.extension).
TSAFRIR_STEPS = tuple(60 * minutes for minutes in STEPS_MINUTES)
# No planned limit is shorter than this: a zero prediction would make a job look free to backfill.
MIN_LIMIT = 1.0


@dataclass(frozen=True, slots=True)
class Plan:
    """``planned``: what the scheduler plans with while the job waits; ``kill``: its enforced
    limit; ``floor``: backfill may start it with any limit in [floor, planned] (Slurm's time_min)."""

    planned: float
    kill: float
    floor: float


class LimitSource(Protocol):
    """A pluggable source of planned limits (see the module docstring)."""

    name: str
    # Backfill candidates tried shortest planned limit first (SJBF) rather than in queue order.
    shortest_first: bool

    def submitted(self, job: int, now: float) -> Plan: ...

    def expired(self, job: int, first_planned: float, expiries: int) -> float:
        """The new planned limit at the ``expiries``-th expiry (1, 2, ...) of a job that started
        planned with ``first_planned``."""
        ...

    def ended(self, job: int, now: float, ran: float) -> None: ...


def stepped(first_planned: float, expiries: int, request: float) -> float:
    """Tsafrir's steps: the original limit plus 1 min, 5, 15, 30 min, 1, 2, 5, 10, 20, 50, 100 h at
    the 1st, 2nd, ... expiry, never past the request (which it reaches after the last step)."""
    if expiries > len(TSAFRIR_STEPS):
        return request
    return min(request, first_planned + TSAFRIR_STEPS[expiries - 1])


class RequestLimits:
    """What Slurm does today: plan with the user's request, kill at it."""

    name = "request"
    shortest_first = False

    def __init__(self, workload: Workload) -> None:
        self._request = workload.request

    def submitted(self, job: int, now: float) -> Plan:
        request = self._request[job]
        return Plan(request, request, request)

    def expired(self, job: int, first_planned: float, expiries: int) -> float:
        return self._request[job]

    def ended(self, job: int, now: float, ran: float) -> None:
        return None


class TsafrirLimits:
    """EASY+ (and with ``shortest_first`` EASY++): plan with the mean run time of the user's last two
    jobs that ended before this submission, capped at the request (the request while there are not
    two); kill at the request; at expiry the prediction becomes the request (Tsafrir's correction:
    below the request the first correction is the request itself)."""

    def __init__(self, workload: Workload, *, shortest_first: bool = False) -> None:
        self.name = "easy++" if shortest_first else "tsafrir"
        self.shortest_first = shortest_first
        self._request = workload.request
        self._user = workload.user
        self._last_two: dict[int, tuple[float, float]] = {}

    def submitted(self, job: int, now: float) -> Plan:
        request = self._request[job]
        history = self._last_two.get(self._user[job])
        if history is None or math.isnan(history[0]):
            planned = request
        else:
            planned = min(request, max(MIN_LIMIT, (history[0] + history[1]) / 2))
        return Plan(planned, request, planned)

    def expired(self, job: int, first_planned: float, expiries: int) -> float:
        request = self._request[job]
        if first_planned < request:
            return request
        # Only reached where a job may outlive its request (never here: the request kills).
        return stepped(first_planned, expiries, math.inf)

    def ended(self, job: int, now: float, ran: float) -> None:
        user = self._user[job]
        previous = self._last_two.get(user, (math.nan, math.nan))
        self._last_two[user] = (previous[1], ran)


class PredictedLimits:
    """slurm-harp's rule, from a per-job array of predicted limits (seconds; NaN: none, use the
    request), in one of its modes:

    - ``rewrite``: the prediction replaces the request: planned with it and killed at it (the
      engine then runs the job again with the user's request: one re-run, engine.py);
    - ``time_min``: the job keeps its request; backfill may start it with any limit down to the
      prediction; one started with a cut limit is extended by Tsafrir's steps when it reaches it;
    - ``extend``: planned with the prediction, killed only at the request, extended by Tsafrir's
      steps (capped at the request) each time the planned limit is reached.
    """

    MODES = ("rewrite", "time_min", "extend")
    EXTENSIONS = ("steps", "conditional")

    def __init__(
        self,
        workload: Workload,
        predictions: Sequence[float],
        mode: str,
        *,
        shortest_first: bool = True,
        extension: str = "steps",
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(self.MODES)}")
        if extension not in self.EXTENSIONS:
            raise ValueError(f"unknown extension {extension!r}; one of {', '.join(self.EXTENSIONS)}")
        # "conditional": at an expiry, the limit becomes a quantile of the run time of the jobs that
        # outlived the same share of their prediction (ConditionalRatios); "steps": Tsafrir's.
        self._conditional = ConditionalRatios() if extension == "conditional" else None
        self._current: dict[int, float] = {}
        if len(predictions) != len(workload):
            raise ValueError(f"{len(predictions)} predictions for {len(workload)} jobs")
        self.name = f"ours-{mode}"
        self.mode = mode
        self.shortest_first = shortest_first
        self._request = workload.request
        self._predicted = [
            request if math.isnan(p) else min(request, max(MIN_LIMIT, p))
            for p, request in zip(predictions, workload.request, strict=True)
        ]

    def submitted(self, job: int, now: float) -> Plan:
        request = self._request[job]
        predicted = self._predicted[job]
        if self.mode == "rewrite":
            return Plan(predicted, predicted, predicted)
        if self.mode == "time_min":
            return Plan(request, request, predicted)
        return Plan(predicted, request, predicted)

    def expired(self, job: int, first_planned: float, expiries: int) -> float:
        request = self._request[job]
        if self._conditional is None:
            return stepped(first_planned, expiries, request)
        current = self._current.get(job, first_planned)
        predicted = self._predicted[job]
        ratio = self._conditional.quantile_above(current / predicted)
        step = stepped(first_planned, expiries, request)
        new = step if ratio is None else min(request, max(current + MIN_EXTENSION, predicted * ratio))
        self._current[job] = new
        return new

    def ended(self, job: int, now: float, ran: float) -> None:
        self._current.pop(job, None)
        predicted = self._predicted[job]
        if self._conditional is not None and predicted < self._request[job]:
            self._conditional.add(ran / predicted)


# An extension adds at least this much: a limit that barely moves is reached again at once.
MIN_EXTENSION = 60.0
