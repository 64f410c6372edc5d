"""advice.tariff: Slurm's billing under harp.toml's prices."""

from __future__ import annotations

import pytest

from slurm_harp.advice.billing import Mode, parse_weights
from slurm_harp.advice.partition_table import from_scontrol
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff

SLURM = from_scontrol(
    "PartitionName=gpu TRESBillingWeights=CPU=1,Mem=0.25G,GRES/gpu=8 MaxTime=2-00:00:00\n"
    "PartitionName=cpu MaxTime=12:00:00\n",
    "PriorityFlags           = MAX_TRES\n",
)
JOB = {"cpu": 8, "mem": 64 * 1024, "gres/gpu": 2}  # 8 CPUs, 64 GiB, 2 GPUs


def test_slurms_weights_and_mode_at_the_default_price() -> None:
    tariff = Tariff.of(Prices(), SLURM)
    assert tariff.mode is Mode.MAX_TRES and tariff.currency == "billing-hours"
    assert tariff.billed("gpu", JOB) == 16.0  # max(8 x 1, 64 x 0.25, 2 x 8)
    assert tariff.billed("cpu", JOB) == 8.0  # no weights: the CPUs
    assert tariff.partition("gpu").max_minutes == 2880 and tariff.partition("cpu").max_minutes == 720
    assert tariff.cost("gpu", JOB, hours=2.5) == 40.0


def test_harp_toml_prices_weights_and_mode_override_slurm() -> None:
    prices = Prices(
        price=0.5,
        currency="EUR",
        mode=Mode.SUM,
        partitions=(
            PartitionPrice("gpu", price=0.25),
            PartitionPrice("cpu", weights=parse_weights("CPU=1,Mem=0.5G")),
            PartitionPrice("cloud", price=2.0, weights=parse_weights("GRES/gpu=10")),
        ),
    )
    tariff = Tariff.of(prices, SLURM)
    assert tariff.currency == "EUR" and tariff.mode is Mode.SUM
    # gpu: Slurm's weights summed (8 + 16 + 16 = 40) at its own 0.25 per unit-hour.
    assert tariff.billed("gpu", JOB) == 40.0 and tariff.rate("gpu", JOB) == 10.0
    # cpu: harp.toml's weights (8 + 32) at the site's 0.5; Slurm's MaxTime kept.
    assert tariff.rate("cpu", JOB) == 20.0 and tariff.partition("cpu").max_minutes == 720
    # cloud: only in harp.toml, so no MaxTime.
    assert tariff.rate("cloud", JOB) == 40.0 and tariff.partition("cloud").max_minutes is None


def test_a_partition_nobody_names_bills_its_cpus_at_the_site_price() -> None:
    tariff = Tariff.of(Prices(price=3.0), SLURM)
    assert tariff.rate("elsewhere", JOB) == 24.0
    assert tariff.partition("elsewhere").max_minutes is None


def test_without_slurm_text_harp_toml_alone_prices() -> None:
    tariff = Tariff.of(Prices(partitions=(PartitionPrice("gpu", weights=parse_weights("GRES/gpu=4")),)))
    assert tariff.mode is Mode.SUM and tariff.cost("gpu", JOB, hours=1.0) == pytest.approx(8.0)
