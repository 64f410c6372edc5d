"""advice.quote: a configuration's expected cost, re-executions included, computed by hand."""

from __future__ import annotations

import pytest

from slurm_harp.advice.billing import parse_weights
from slurm_harp.advice.partition_table import from_scontrol
from slurm_harp.advice.quote import Allocation, Configuration, price
from slurm_harp.advice.survival import PointMasses
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff

GPU_PRICE = PartitionPrice("gpu", weights=parse_weights("GRES/gpu=10"))
TARIFF = Tariff.of(
    Prices(price=0.1, currency="EUR", partitions=(GPU_PRICE,)),
    from_scontrol(
        "PartitionName=gpu TRESBillingWeights=CPU=1,Mem=0.25G,GRES/gpu=8 MaxTime=01:00:00\n"
        "PartitionName=long MaxTime=UNLIMITED\n"
    ),
)
TWO_POINT = PointMasses([5.0, 30.0], [0.5, 0.5])


def test_allocation_tres() -> None:
    a = Allocation(cpus=8, mem_mb=65536, nodes=2, gpus=4)
    assert a.tres() == {"cpu": 8.0, "mem": 65536.0, "node": 2.0, "gres/gpu": 4.0}


def test_expected_cost_is_the_rate_times_the_expected_hours() -> None:
    # gpu: harp.toml's weights replace Slurm's: 2 GPUs x 10 = 20 units at 0.1 EUR: 2 EUR an hour.
    config = Configuration("gpu", Allocation(cpus=8, mem_mb=65536, gpus=2), limit_minutes=10)
    quote = price(TARIFF, config, TWO_POINT)
    assert quote.billed_units == 20.0 and quote.rate == pytest.approx(2.0) and quote.currency == "EUR"
    assert quote.cap_minutes == 60  # the partition's MaxTime
    assert [a.limit for a in quote.reexecution.attempts] == [10, 20, 40]
    assert quote.expected_cost == pytest.approx(2.0 * 32.5 / 60)
    assert quote.p_unfinished == 0.0


def test_the_lower_of_maxtime_and_the_given_cap_stops_the_attempts() -> None:
    config = Configuration("gpu", Allocation(cpus=1, gpus=1), limit_minutes=10)
    quote = price(TARIFF, config, TWO_POINT, cap=25)
    assert [a.limit for a in quote.reexecution.attempts] == [10, 20, 25]
    assert quote.p_unfinished == 0.5  # a 30-minute run cannot finish under 25
    # Rate 1 EUR an hour: 1/2 x 5 + 1/2 x (10 + 20 + 25) minutes.
    assert quote.expected_cost == pytest.approx((0.5 * 5 + 0.5 * 55) / 60)


def test_a_partition_without_maxtime_needs_a_cap() -> None:
    config = Configuration("long", Allocation(cpus=4), limit_minutes=10)
    with pytest.raises(ValueError, match="partition long has no MaxTime: give a cap"):
        price(TARIFF, config, TWO_POINT)
    quote = price(TARIFF, config, TWO_POINT, cap=120)  # no weights: 4 CPUs at 0.1
    assert quote.rate == pytest.approx(0.4) and quote.cap_minutes == 120


def test_a_first_limit_above_the_cap_is_refused() -> None:
    config = Configuration("gpu", Allocation(cpus=1), limit_minutes=90)
    with pytest.raises(ValueError, match="limit 90 min is above the cap 60 min"):
        price(TARIFF, config, TWO_POINT)
