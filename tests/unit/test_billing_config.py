"""harp.toml's [billing]: parsed into advice.tariff.Prices; a bad value names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.advice.billing import Mode
from slurm_harp.advice.tariff import Prices, Tariff
from slurm_harp.config import ConfigError, load, parse

GOOD = """
[billing]
price = 0.02
currency = "EUR"
mode = "max_tres"

[[billing.partition]]
name = "gpu"
price = 0.5
weights = "CPU=1.0,Mem=0.25G,GRES/gpu=8"

[[billing.partition]]
name = "bigmem"
weights = "Mem=1G"
"""


def test_billing_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "harp.toml"
    path.write_text(GOOD)
    billing = load(path).billing
    assert (billing.price, billing.currency, billing.mode) == (0.02, "EUR", Mode.MAX_TRES)
    gpu, bigmem = billing.partitions
    assert gpu.name == "gpu" and gpu.price == 0.5 and gpu.weights is not None
    assert gpu.weights.per_unit["gres/gpu"] == 8.0
    assert bigmem.price is None and bigmem.weights is not None
    tariff = Tariff.of(billing)
    assert tariff.rate("bigmem", {"cpu": 1, "mem": 100 * 1024}) == pytest.approx(100 * 0.02)


def test_billing_defaults() -> None:
    assert parse({}).billing == Prices(price=1.0, currency="billing-hours", mode=None, partitions=())
    assert parse({"billing": {"price": 2}}).billing.price == 2.0  # an integer is a number


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[billing]\nprice = -1\n", "billing.price: must be >= 0"),
        ("[billing]\nprice = 'cheap'\n", "billing.price: expected float"),
        ("[billing]\nprice = inf\n", "billing.price: must be a finite number"),
        ("[billing]\ncurrency = ''\n", "billing.currency: must name what prices are in"),
        ("[billing]\nmode = 'max'\n", "billing.mode: must be one of sum, max_tres, max_tres_gres"),
        ("[billing]\nrate = 1\n", "billing.rate: unknown key"),
        ("[billing]\npartition = 'gpu'\n", "billing.partition: must be an array of tables"),
        ("[[billing.partition]]\nprice = 1\n", "billing.partition[0].name: missing"),
        ("[[billing.partition]]\nname = 'gpu'\n", "billing.partition[0]: needs a price and/or weights"),
        ("[[billing.partition]]\nname = 'gpu'\nprice = -2\n", "billing.partition[0].price: must be >= 0"),
        ("[[billing.partition]]\nname = 'gpu'\ncost = 2\n", "billing.partition.cost: unknown key"),
        (
            "[[billing.partition]]\nname = 'gpu'\nweights = 'CPU=1,GPU=2'\n",
            "billing.partition[0].weights: TRESBillingWeights 'CPU=1,GPU=2': item 'GPU=2': unknown TRES type",
        ),
        (
            "[[billing.partition]]\nname = 'gpu'\nweights = 'Mem=1Q'\n",
            "billing.partition[0].weights: TRESBillingWeights 'Mem=1Q': item 'Mem=1Q': the weight must be",
        ),
        (
            "[[billing.partition]]\nname = 'a'\nprice = 1\n[[billing.partition]]\nname = 'a'\nprice = 2\n",
            "billing.partition[1].name: partition 'a' is listed twice",
        ),
        # Finite but past any real price or weight: 1e308 made every cost inf, and with a price of 0
        # NaN, which failed the advice with an IndexError (INTERNAL).
        ("[billing]\nprice = 1e308\n", "billing.price: must be >= 0 and below 1e+12 (per billed unit-hour"),
        ("[[billing.partition]]\nname = 'a'\nprice = 1e12\n", "billing.partition[0].price: must be >= 0 and"),
        (
            "[[billing.partition]]\nname = 'a'\nprice = 0.0\nweights = 'CPU=1.0,Mem=1e308'\n",
            "billing.partition[0].weights: the weight of mem must be below 1e+12 a unit, got 1e+308",
        ),
    ],
)
def test_bad_billing_names_key_and_file(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(path) in str(err.value) and names in str(err.value)
