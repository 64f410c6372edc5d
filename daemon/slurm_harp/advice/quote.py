"""The price of one way to run a job: its tariff rate times its expected re-executed hours.

A ``Configuration`` is what the advice compares: a partition, an allocation and a first time
limit. Its ``Quote`` is

    expected cost = rate x E[minutes charged over all attempts] / 60

with the rate from the site's tariff (tariff.py: billed units x price per unit-hour, the same
for every attempt: only the limit changes) and the minutes from HARP's re-execution policy
(reexecution.py), attempts capped at the partition's MaxTime or, tighter, the given cap.

``cheapest_limit`` picks the first limit of a configuration from the user's own run times: the
one of least expected cost among those run times plus 10 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurm_harp.advice.reexecution import Reexecution, expected_reexecution
from slurm_harp.advice.survival import Empirical, Runtime
from slurm_harp.advice.tariff import Tariff

__all__ = ["Allocation", "Configuration", "Quote", "cheapest_limit", "price", "same"]

LIMIT_MARGIN = 1.1  # a first limit is a run time of the evidence plus 10 %, in whole minutes
MOST_LIMITS = 16  # first limits tried: run times of the evidence, evenly spread, the longest too


@dataclass(frozen=True, slots=True)
class Allocation:
    """What a job holds while it runs, in Slurm's TRES units (memory in MiB, the whole job's)."""

    cpus: int
    mem_mb: float = 0.0
    nodes: int = 1
    gpus: int = 0
    gpu_type: str | None = None  # the partition's one GPU type: slurmctld bills gres/gpu:<type> too

    def tres(self) -> dict[str, float]:
        """The allocation as billing.billed_units reads it."""
        base = {"cpu": float(self.cpus), "mem": float(self.mem_mb), "node": float(self.nodes)}
        gpus = {"gres/gpu": float(self.gpus)} if self.gpus else {}
        if self.gpus and self.gpu_type:
            gpus[f"gres/gpu:{self.gpu_type.lower()}"] = float(self.gpus)
        return base | gpus


@dataclass(frozen=True, slots=True)
class Configuration:
    partition: str
    allocation: Allocation
    limit_minutes: float  # the first attempt's time limit


@dataclass(frozen=True, slots=True)
class Quote:
    configuration: Configuration
    billed_units: float
    rate: float  # currency per hour
    currency: str
    cap_minutes: float  # the largest limit an attempt may have
    reexecution: Reexecution

    @property
    def expected_cost(self) -> float:
        return self.rate * self.reexecution.expected_minutes / 60.0

    @property
    def p_unfinished(self) -> float:
        """P(the job is killed at the cap: it cannot finish in this configuration)."""
        return self.reexecution.p_unfinished


def price(tariff: Tariff, configuration: Configuration, runtime: Runtime, cap: float | None = None) -> Quote:
    """The expected cost of ``configuration`` for a job whose run time (minutes) follows
    ``runtime``, re-executions included. Attempts stop at the partition's MaxTime or at ``cap``
    (the user's own request, say), whichever is lower; ValueError when there is neither, or the
    first limit is above it."""
    place = tariff.partition(configuration.partition)
    bounds = [b for b in (place.max_minutes, cap) if b is not None]
    if not bounds:
        raise ValueError(
            f"partition {configuration.partition} has no MaxTime: give a cap (the user's request)"
        )
    top = float(min(bounds))
    if configuration.limit_minutes > top:
        raise ValueError(f"limit {configuration.limit_minutes:g} min is above the cap {top:g} min")
    tres = configuration.allocation.tres()
    return Quote(
        configuration=configuration,
        billed_units=tariff.billed(configuration.partition, tres),
        rate=tariff.rate(configuration.partition, tres),
        currency=tariff.currency,
        cap_minutes=top,
        reexecution=expected_reexecution(configuration.limit_minutes, top, runtime),
    )


def cheapest_limit(
    tariff: Tariff, partition: str, allocation: Allocation, runtime: Empirical, cap: float, floor: float = 1
) -> Quote:
    """The quote of least expected cost for ``allocation`` in ``partition``, whose run time is
    one of ``runtime``'s (equally likely), over first limits of at most MOST_LIMITS of those run
    times (evenly spread, the longest always) plus 10 %, in whole minutes, at least ``floor`` (the
    job's --time-min: slurmctld refuses a limit below it) and at most ``cap``; ties to the faster,
    then the shorter limit."""
    values = runtime.values
    step = max(1, math.ceil(len(values) / (MOST_LIMITS - 1)))
    picked = {*values[step - 1 :: step], values[-1]}
    least = max(1.0, float(floor))
    limits = sorted({min(float(max(least, math.ceil(same(LIMIT_MARGIN * t)))), cap) for t in picked})
    quotes = [price(tariff, Configuration(partition, allocation, limit), runtime, cap) for limit in limits]
    return min(
        quotes,
        key=lambda q: (
            same(q.expected_cost),
            same(q.reexecution.expected_minutes),
            q.configuration.limit_minutes,
        ),
    )


def same(value: float) -> float:
    """``value`` to 9 significant digits: costs and times equal but for rounding compare equal
    (perfect scaling gives every size the same cost, reached by different float paths)."""
    return float(f"{value:.9g}")
