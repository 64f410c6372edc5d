"""Where the limits the scheduler plans with come from.

Each source answers three things about a job: at submit, its ``Plan`` (the limit planned with while it
waits, the limit that kills it, and the shortest limit backfill may start it with); when a running
job comes within the source's ``lead`` of its planned limit below its kill limit, the new planned
limit; and it hears when a job ends (Tsafrir's predictions and the conditional extension learn from
ended jobs). The kill limit is fixed per attempt: the engine ends a job at min(run time, kill limit),
so a planned limit never kills anything by itself.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from slurm_harp.core.extension import DEFAULT_LEAD_S, WINDOW_DAYS, ConditionalRatios, next_limit
from slurm_harp.core.policy import Policy
from slurm_harp.core.request import Target
from slurm_harp.simulation.workload import Workload

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
    # Seconds before a running job reaches its planned limit that the limit is raised (0: at it).
    lead: float

    def submitted(self, job: int, now: float) -> Plan: ...

    def expired(self, job: int, now: float, planned: float) -> float:
        """The new planned limit (seconds) of a running job planned with ``planned``, ``lead``
        before it reaches it; the engine keeps it between ``planned`` and the kill limit."""
        ...

    def ended(self, job: int, now: float, ran: float) -> None: ...


class RequestLimits:
    """What Slurm does today: plan with the user's request, kill at it."""

    name = "request"
    shortest_first = False
    lead = 0.0

    def __init__(self, workload: Workload) -> None:
        self._request = workload.request

    def submitted(self, job: int, now: float) -> Plan:
        request = self._request[job]
        return Plan(request, request, request)

    def expired(self, job: int, now: float, planned: float) -> float:
        return self._request[job]

    def ended(self, job: int, now: float, ran: float) -> None:
        return None


class TimeMinLimits:
    """Slurm's own ``--time-min``, with no guard: planned and killed at the request; backfill may
    start a job with any limit down to its time_min (seconds; NaN: none), and the limit it starts
    with is never raised. For replaying jobs as a cluster without harp ran them (the sim-to-real
    check); a job that runs past a cut limit runs on to its request here, where Slurm kills it."""

    name = "time_min"
    shortest_first = False
    lead = 0.0

    def __init__(self, workload: Workload, time_min: Sequence[float]) -> None:
        if len(time_min) != len(workload):
            raise ValueError(f"{len(time_min)} time_min values for {len(workload)} jobs")
        self._request = workload.request
        self._floor = [
            r if math.isnan(t) else min(r, t) for t, r in zip(time_min, workload.request, strict=True)
        ]

    def submitted(self, job: int, now: float) -> Plan:
        return Plan(self._request[job], self._request[job], self._floor[job])

    def expired(self, job: int, now: float, planned: float) -> float:
        return planned

    def ended(self, job: int, now: float, ran: float) -> None:
        return None


class TsafrirLimits:
    """EASY+ (and with ``shortest_first`` EASY++): plan with the mean run time of the user's last two
    jobs that ended before this submission, capped at the request (the request while there are not
    two); kill at the request; at expiry the prediction becomes the request (Tsafrir's correction:
    below the request the first correction is the request itself)."""

    lead = 0.0  # Tsafrir corrects a prediction when the job reaches it

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

    def expired(self, job: int, now: float, planned: float) -> float:
        return self._request[job]

    def ended(self, job: int, now: float, ran: float) -> None:
        user = self._user[job]
        previous = self._last_two.get(user, (math.nan, math.nan))
        self._last_two[user] = (previous[1], ran)


class PredictedLimits:
    """slurm-harp's rule, from a per-job array of limits (seconds; NaN: none, use the request;
    `harp simulate` gives it what the daemon's policy sets, ``as_set``), in one of its modes:

    - ``rewrite``: the prediction replaces the request: planned with it and killed at it (the
      engine then runs the job again with the user's request: one re-run, engine.py);
    - ``time_min``: the job keeps its request; backfill may start it with any limit down to the
      prediction; one started with a cut limit is extended as `harp guard` extends it;
    - ``extend``: planned with the prediction, killed only at the request, extended as `harp guard`
      extends it, never past the request.

    Backfill candidates are tried in queue order, as `request`'s and Slurm's are (``shortest_first``
    orders them shortest plan first, EASY++'s SJBF): the rows then differ by their limits alone.

    An extension is core.extension's ``next_limit``, the guard's own rule, with ``extension``
    "steps" (Tsafrir's) or "conditional" (the site's ended jobs, ``WindowedRatios``), the guard's
    DEFAULT_LEAD_S and no site bound. What the event-driven replay changes, each for its reason:
    the guard acts at its first poll within the lead, here exactly at the lead before the planned
    limit in seconds (a limit given not in whole minutes, which ``as_set`` never gives: up to 59 s
    sooner than the guard would); limits go to ``next_limit`` in whole minutes, as Slurm holds
    them, and its new limit comes back capped at the request in seconds (an SWF request need not be
    whole minutes); the ratios are refreshed at each job end, where the guard's file is at each
    harvest.
    """

    MODES = ("rewrite", "time_min", "extend")
    EXTENSIONS = ("steps", "conditional")

    def __init__(
        self,
        workload: Workload,
        predictions: Sequence[float],
        mode: str,
        *,
        shortest_first: bool = False,
        extension: str = "steps",
    ) -> None:
        if mode not in self.MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(self.MODES)}")
        if extension not in self.EXTENSIONS:
            raise ValueError(f"unknown extension {extension!r}; one of {', '.join(self.EXTENSIONS)}")
        if len(predictions) != len(workload):
            raise ValueError(f"{len(predictions)} predictions for {len(workload)} jobs")
        self.name = f"ours-{mode}"
        self.mode = mode
        self.shortest_first = shortest_first
        # Rewrite mode kills at the prediction: nothing is extended.
        self.lead = 0.0 if mode == "rewrite" else DEFAULT_LEAD_S
        conditional = extension == "conditional" and mode != "rewrite"
        self._ratios = WindowedRatios() if conditional else None
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

    def expired(self, job: int, now: float, planned: float) -> float:
        request = self._request[job]
        limit = minutes(planned)
        ratios = None if self._ratios is None else self._ratios.at(now)
        # Asked as the guard asks at the lead: the remaining time is exactly the lead (as in
        # extensions_needed), or the job has just started.
        elapsed = max(0.0, limit * 60.0 - self.lead)
        ext = next_limit(
            minutes(self._predicted[job]), limit, minutes(request), elapsed, self.lead, ratios=ratios
        )
        # None: the limit is the request in whole minutes already.
        return request if ext is None else min(request, 60.0 * ext.new_limit)

    def ended(self, job: int, now: float, ran: float) -> None:
        predicted = minutes(self._predicted[job])
        # As observed_ratio: the jobs whose prediction was below their own limit (none is killed
        # before it in these modes).
        if self._ratios is not None and predicted < minutes(self._request[job]):
            self._ratios.add(now, ran / (60.0 * predicted))


def as_set(predictions: Sequence[float], workload: Workload, policy: Policy) -> list[float]:
    """Time predictions (seconds; NaN: none) as the daemon's ``policy`` turns them into limits
    (core.policy): whole minutes rounded up, at least the time floor; NaN, the request kept, where
    that would not save min_gain of the request, and for a job whose user asked for no limit
    (``Policy.decide``: NOT_REQUESTED). What PredictedLimits plans with."""
    out = []
    unasked = workload.no_request
    for job, (predicted, request) in enumerate(zip(predictions, workload.request, strict=True)):
        if math.isnan(predicted) or job in unasked:
            out.append(math.nan)
            continue
        proposed = policy.proposed(Target.TIME, predicted / 60.0)
        out.append(min(request, 60.0 * proposed) if policy.saves(proposed, request / 60.0) else math.nan)
    return out


def minutes(seconds: float) -> int:
    """A limit in seconds as Slurm holds it: whole minutes, rounded up, at least one."""
    return max(1, math.ceil(seconds / 60.0 - 1e-9))


class WindowedRatios:
    """The conditional extension's ConditionalRatios over the jobs ended in the last WINDOW_DAYS
    before ``now``, as `harp harvest` gives them to the guard (accounting/extension_file.py)."""

    def __init__(self) -> None:
        self._ratios = ConditionalRatios()
        self._ended: deque[tuple[float, float]] = deque()  # (end, ratio), in end order

    def add(self, now: float, ratio: float) -> None:
        self._ended.append((now, ratio))
        self._ratios.add(ratio)

    def at(self, now: float) -> ConditionalRatios:
        since = now - WINDOW_DAYS * 86400.0
        while self._ended and self._ended[0][0] < since:
            self._ratios.remove(self._ended.popleft()[1])
        return self._ratios
