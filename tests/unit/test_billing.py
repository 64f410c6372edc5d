"""advice.billing against Slurm's own examples (tres.html) and hand-computed cases."""

from __future__ import annotations

import re

import pytest

from slurm_harp.advice.billing import Mode, billed_units, parse_priority_flags, parse_weights
from tests.conftest import REPO

SLURM_EXAMPLE = 'TRESBillingWeights="CPU=1.0,Mem=0.25G,GRES/gpu=2.0,license/licA=1.5"'
GIB = 1024.0


def slurm_example() -> dict[str, float]:
    return dict(parse_weights(SLURM_EXAMPLE.partition("=")[2]).per_unit)


def test_slurms_example_is_summed_without_truncation() -> None:
    w = parse_weights(SLURM_EXAMPLE.partition("=")[2])
    assert billed_units({"cpu": 1, "mem": 8 * GIB}, w) == pytest.approx(3.0)
    # Accounting would show billing=4; the price uses the double, as fairshare does.
    assert billed_units({"cpu": 1, "mem": 8 * GIB, "license/lica": 1}, w) == pytest.approx(4.5)
    assert billed_units({"cpu": 1, "mem": 10 * GIB, "license/licA": 1}, w) == pytest.approx(5.0)


def test_max_tres_takes_the_largest_node_tres_and_adds_the_global_ones() -> None:
    w = parse_weights(SLURM_EXAMPLE.partition("=")[2])
    assert billed_units({"cpu": 1, "mem": 8 * GIB}, w, Mode.MAX_TRES) == pytest.approx(2.0)
    assert billed_units({"cpu": 1, "mem": 8 * GIB, "license/lica": 1}, w, Mode.MAX_TRES) == pytest.approx(3.5)
    # GPUs are node TRES too: the larger of 32 CPUs x 1.0 and 4 GPUs x 2.0, then of 2 x 1.0 and 8.
    assert billed_units({"cpu": 32, "mem": 8 * GIB, "gres/gpu": 4}, w, Mode.MAX_TRES) == pytest.approx(32.0)
    assert billed_units({"cpu": 2, "mem": 8 * GIB, "gres/gpu": 4}, w, Mode.MAX_TRES) == pytest.approx(8.0)


def test_max_tres_gres_adds_the_gres_to_the_maximum_of_the_rest() -> None:
    w = parse_weights(SLURM_EXAMPLE.partition("=")[2])
    assert billed_units({"cpu": 1, "mem": 8 * GIB}, w, Mode.MAX_TRES_GRES) == pytest.approx(2.0)
    # Slurm's page prints 3.0 here; its own formula 1 x 2.0 + max(1 x 1.0, 8 x 0.25) is 4.0.
    one_gpu = {"cpu": 1, "mem": 8 * GIB, "gres/gpu": 1}
    assert billed_units(one_gpu, w, Mode.MAX_TRES_GRES) == pytest.approx(4.0)


def test_the_docs_billing_table_is_what_the_code_bills() -> None:
    text = (REPO / "docs" / "advice.md").read_text()
    assert SLURM_EXAMPLE.partition("=")[2] in text
    jobs = {
        "1 CPU, 8 GiB": {"cpu": 1, "mem": 8 * GIB},
        "1 CPU, 8 GiB, 1 licA": {"cpu": 1, "mem": 8 * GIB, "license/lica": 1},
        "1 CPU, 8 GiB, 1 GPU": {"cpu": 1, "mem": 8 * GIB, "gres/gpu": 1},
    }
    w = parse_weights(SLURM_EXAMPLE.partition("=")[2])
    rows = re.findall(r"^\| (1 CPU[^|]*) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", text, re.M)
    assert [r[0] for r in rows] == list(jobs)
    for job, *figures in rows:
        got = [billed_units(jobs[job], w, mode) for mode in (Mode.SUM, Mode.MAX_TRES, Mode.MAX_TRES_GRES)]
        assert got == pytest.approx([float(f) for f in figures]), job


@pytest.mark.parametrize(
    ("weights", "mem_mb", "billed"),
    [
        ("Mem=0.25", 8192, 2048.0),  # per MiB, Slurm's base unit for memory
        ("Mem=0.25G", 8192, 2.0),  # per GiB
        ("Mem=0.25g", 8192, 2.0),  # suffixes are case-insensitive
        ("Mem=0.25GB", 8192, 2.0),  # ...and may be written as a size
        ("Mem=0.25GiB", 8192, 2.0),
        ("Mem=1T", 2 * 1024 * 1024, 2.0),  # per TiB
        ("Mem=1M", 100, 100.0),  # the base unit itself: no change
        ("Mem=1K", 100, 100.0),  # below the base unit: no change either (Slurm: not per KiB)
    ],
)
def test_memory_weights_follow_slurms_units(weights: str, mem_mb: float, billed: float) -> None:
    assert billed_units({"mem": mem_mb}, parse_weights(weights)) == pytest.approx(billed)


def test_a_suffix_on_a_counted_tres_is_per_1024_of_it() -> None:
    assert billed_units({"cpu": 2048}, parse_weights("CPU=1K")) == pytest.approx(2.0)


def test_gpus_plain_and_typed() -> None:
    w = parse_weights("CPU=1,GRES/gpu=2.0,GRES/gpu:a100=3")
    assert w.per_unit == {"cpu": 1.0, "gres/gpu": 2.0, "gres/gpu:a100": 3.0}
    # Slurm tracks both gres/gpu and gres/gpu:a100 for an a100 job: both are billed.
    assert billed_units({"cpu": 4, "gres/gpu": 2, "gres/gpu:a100": 2}, w) == pytest.approx(4 + 4 + 6)


def test_without_weights_the_cpus_are_billed_whatever_the_mode() -> None:
    job = {"cpu": 12, "mem": 64 * GIB, "gres/gpu": 4}
    assert billed_units(job, None) == 12.0
    assert billed_units(job, None, Mode.MAX_TRES) == 12.0


def test_tres_without_a_weight_cost_nothing_and_billing_is_never_weighted() -> None:
    w = parse_weights("GRES/gpu=10,Billing=100")
    assert billed_units({"cpu": 64, "mem": 1e6, "gres/gpu": 1, "billing": 5}, w) == 10.0


def test_names_are_case_insensitive_empty_items_skipped_and_the_last_weight_kept() -> None:
    w = parse_weights(' "cpu=1.0,, MEM=2.5e-1G ,CPU=3" ')
    assert w.per_unit == pytest.approx({"cpu": 3.0, "mem": 0.25 / 1024})
    assert w.text == "cpu=1.0,, MEM=2.5e-1G ,CPU=3"


@pytest.mark.parametrize("text", ["", " , "])
def test_weights_without_an_item_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"TRESBillingWeights .*: no TRES=weight item"):
        parse_weights(text)


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ("CPU", "expected TRES=weight"),
        ("=1", "expected TRES=weight"),
        ("CUP=1", "unknown TRES type 'cup'"),
        ("GRES=2", "a gres TRES needs a name"),
        ("license/=2", "a license TRES needs a name"),
        ("CPU=abc", "the weight must be a number >= 0"),
        ("CPU=-1", "the weight must be a number >= 0"),
        ("CPU=", "the weight must be a number >= 0"),
        ("Mem=1X", "the weight must be a number >= 0 with an optional unit K, M, G, T or P"),
        ("CPU=inf", "the weight must be a number >= 0"),
        ("CPU=1e999", "the weight must be finite"),
    ],
)
def test_malformed_weights_name_the_item(item: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"item {item!r}: {problem}")):
        parse_weights(f"Node=1,{item}")


@pytest.mark.parametrize(
    ("flags", "mode"),
    [
        ("", Mode.SUM),
        ("NO_FAIR_TREE,CALCULATE_RUNNING", Mode.SUM),
        ("MAX_TRES", Mode.MAX_TRES),
        ("calculate_running, max_tres", Mode.MAX_TRES),
        ("MAX_TRES_GRES", Mode.MAX_TRES_GRES),
        ("MAX_TRES,MAX_TRES_GRES", Mode.MAX_TRES_GRES),  # slurmctld's reader: MAX_TRES_GRES first
    ],
)
def test_priority_flags_set_the_mode(flags: str, mode: Mode) -> None:
    assert parse_priority_flags(flags) is mode
