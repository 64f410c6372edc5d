"""HARP's re-execution policy, and the expected cost of a limit under it.

A run killed at its time limit is run again with the limit doubled, until it finishes; no
attempt's limit exceeds the cap (the partition's MaxTime, or the user's own request), and a run
killed at the cap cannot finish at all. With limits L1 = L, L(k+1) = min(2 Lk, cap) and T the
run time, attempt k happens when T > L(k-1) (L0 = 0) and then runs min(T, Lk). So

    E[minutes charged] = sum over k of  Lk x P(T > Lk)  +  E[T; L(k-1) < T <= Lk]

(a killed attempt is charged its whole limit, the finishing one its run time); the expected
number of attempts is the sum of P(T > L(k-1)), and the job never finishes with P(T > cap).
The evaluation (evaluation/costs.py) replays the same policy on jobs whose run time is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from slurm_harp.advice.survival import Runtime

__all__ = [
    "GROWTH",
    "Attempt",
    "Reexecution",
    "attempt_limits",
    "charged_minutes",
    "expected_reexecution",
    "next_limit",
]

GROWTH = 2.0  # a killed run's next limit, as a multiple of the limit that killed it
Limit = TypeVar("Limit", float, np.ndarray)


def next_limit(limit: Limit, cap: Limit) -> Limit:
    """The next attempt's limit after a kill at ``limit``: doubled, at most ``cap`` (arrays too)."""
    if isinstance(limit, float) and isinstance(cap, float):  # numpy's scalar path costs ~1 us
        return min(GROWTH * limit, cap)
    out: Limit = np.minimum(GROWTH * limit, cap)
    return out


def attempt_limits(first: float, cap: float) -> tuple[float, ...]:
    """Every attempt's limit: ``first``, doubled after each kill, the last one at ``cap``."""
    if not (math.isfinite(first) and math.isfinite(cap) and 0 < first <= cap):
        raise ValueError(f"attempt limits: need 0 < first limit ({first}) <= cap ({cap}), both finite")
    limits = [float(first)]
    while limits[-1] < cap:
        limits.append(float(next_limit(limits[-1], float(cap))))
    return tuple(limits)


def charged_minutes(first: float, cap: float, minutes: float) -> float:
    """Minutes a run of known length ``minutes`` holds its allocation from a first limit ``first``:
    each attempt killed before it (its whole limit: killed when the run is longer than the limit),
    then the run itself; inf when it is longer than the cap (it never finishes)."""
    limits = attempt_limits(first, cap)
    if minutes > limits[-1]:
        return math.inf
    return sum(t for t in limits if t < minutes) + minutes


@dataclass(frozen=True, slots=True)
class Attempt:
    limit: float  # minutes
    p_runs: float  # P(this attempt happens): the run outlived every earlier limit
    p_killed: float  # P(it is killed at its limit too)
    expected_minutes: float  # its term of the sum: limit x p_killed + E[T; previous < T <= limit]


@dataclass(frozen=True, slots=True)
class Reexecution:
    attempts: tuple[Attempt, ...]

    @property
    def expected_minutes(self) -> float:
        """Expected minutes the job holds its allocation over all its attempts."""
        return sum(a.expected_minutes for a in self.attempts)

    @property
    def expected_attempts(self) -> float:
        return sum(a.p_runs for a in self.attempts)

    @property
    def p_unfinished(self) -> float:
        """P(killed at the cap too: the job cannot finish under this partition's limits)."""
        return self.attempts[-1].p_killed


def expected_reexecution(first: float, cap: float, runtime: Runtime) -> Reexecution:
    """The attempts of a job first given ``first`` minutes, capped at ``cap``, whose run time
    follows ``runtime``. Attempts that cannot happen (probability 0) are left out."""
    attempts: list[Attempt] = []
    previous, p_runs = 0.0, 1.0
    for limit in attempt_limits(first, cap):
        p_killed = runtime.survival(limit)
        spent = limit * p_killed + runtime.partial_mean(previous, limit)
        attempts.append(Attempt(limit=limit, p_runs=p_runs, p_killed=p_killed, expected_minutes=spent))
        previous, p_runs = limit, p_killed
        if p_runs <= 0.0:
            break
    return Reexecution(attempts=tuple(attempts))
