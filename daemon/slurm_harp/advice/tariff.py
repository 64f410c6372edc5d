"""What a job costs the site per hour, per partition: Slurm's billing times harp.toml's price.

The site's own Slurm configuration says how a job is billed (partition_table: weights, MaxTime,
mode); harp.toml's ``[billing]`` (``Prices``) says what one billed unit costs for one hour, and
may give a partition weights of its own (a site without TRESBillingWeights, or one pricing GPUs
differently from its fairshare). So, for a partition:

    rate = billed_units(allocation's TRES, weights, mode) x price     (currency per hour)

weights: harp.toml's for that partition, else Slurm's, else none (the job's CPUs are billed);
mode: harp.toml's ``billing.mode``, else Slurm's PriorityFlags, else SUM; price: the partition's
in harp.toml, else ``billing.price``. A partition neither names is billed like a Slurm partition
without weights, at ``billing.price``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.advice.billing import Mode, Weights, billed_units
from slurm_harp.advice.partition_table import PartitionTable

__all__ = ["DEFAULT_CURRENCY", "PartitionPrice", "PartitionTariff", "Prices", "Tariff"]

# With the default price of 1 per billed unit-hour, a cost is in billed unit-hours.
DEFAULT_CURRENCY = "billing-hours"


@dataclass(frozen=True, slots=True)
class PartitionPrice:
    """One ``[[billing.partition]]`` of harp.toml."""

    name: str
    price: float | None = None  # per billed unit-hour; None: billing.price
    weights: Weights | None = None  # replaces Slurm's TRESBillingWeights for this partition


@dataclass(frozen=True, slots=True)
class Prices:
    """harp.toml's ``[billing]``."""

    price: float = 1.0  # one billed unit for one hour, in ``currency``
    currency: str = DEFAULT_CURRENCY
    mode: Mode | None = None  # None: Slurm's PriorityFlags
    partitions: tuple[PartitionPrice, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionTariff:
    weights: Weights | None
    price: float
    max_minutes: int | None  # Slurm's MaxTime; None: unlimited or unknown


@dataclass(frozen=True, slots=True)
class Tariff:
    partitions: Mapping[str, PartitionTariff] = field(default_factory=dict)
    mode: Mode = Mode.SUM
    price: float = 1.0  # for partitions not in ``partitions``
    currency: str = DEFAULT_CURRENCY

    @classmethod
    def of(cls, prices: Prices, slurm: PartitionTable | None = None) -> Tariff:
        """The site's tariff: Slurm's partitions (None: none read) under harp.toml's prices."""
        slurm = slurm if slurm is not None else PartitionTable()
        own = {p.name: p for p in prices.partitions}
        out = {}
        for name in sorted(set(slurm.partitions) | set(own)):
            known, set_here = slurm.partitions.get(name), own.get(name)
            weights = set_here.weights if set_here and set_here.weights else None
            out[name] = PartitionTariff(
                weights=weights if weights is not None else (known.weights if known else None),
                price=set_here.price if set_here and set_here.price is not None else prices.price,
                max_minutes=known.max_minutes if known else None,
            )
        mode = prices.mode if prices.mode is not None else slurm.mode
        return cls(partitions=out, mode=mode, price=prices.price, currency=prices.currency)

    def partition(self, name: str) -> PartitionTariff:
        return self.partitions.get(name, PartitionTariff(weights=None, price=self.price, max_minutes=None))

    def billed(self, partition: str, tres: Mapping[str, float]) -> float:
        """Billed units of a job holding ``tres`` (billing.billed_units' names and units)."""
        return billed_units(tres, self.partition(partition).weights, self.mode)

    def rate(self, partition: str, tres: Mapping[str, float]) -> float:
        """What holding ``tres`` in ``partition`` costs per hour, in ``currency``."""
        return self.billed(partition, tres) * self.partition(partition).price

    def cost(self, partition: str, tres: Mapping[str, float], hours: float) -> float:
        return self.rate(partition, tres) * hours
