"""advice.gpu_memory: ZeRO's per-GPU model states (the paper's Figure 1), the headroom kept free,
and the fewest GPUs that hold a training."""

from __future__ import annotations

import re

import pytest

from slurm_harp.advice.gpu_memory import (
    HEADROOM,
    POWERS_OF_TWO,
    STATE_BYTES,
    TrainingFacts,
    fewest_gpus,
    model_state_bytes,
)
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.recommend import Ask, advise
from slurm_harp.advice.tariff import Prices, Tariff
from slurm_harp.core.request import JobRequest
from tests.conftest import REPO

GB = 1e9
PAPER = TrainingFacts(parameters=7.5e9)  # mixed-precision Adam: 16 bytes a parameter


def doc_rows(header: str) -> list[list[str]]:
    """The rows of the docs/advice.md table whose header line is ``header``."""
    text = (REPO / "docs" / "advice.md").read_text()
    body = text.split(header + "\n", 1)[1].split("\n\n", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines()[1:]]


def test_the_papers_figure_1() -> None:
    # Rajbhandari et al. 2020, Figure 1: 7.5 B parameters on 64 GPUs.
    exact = [model_state_bytes(TrainingFacts(7.5e9, stage=s), 64) for s in range(4)]
    assert exact == [120e9, 31.40625e9, 16.640625e9, 1.875e9]
    assert [round(b / GB, 1) for b in exact] == [120.0, 31.4, 16.6, 1.9]
    rows = doc_rows("| ZeRO stage | GB per GPU |")
    assert [(int(s), float(gb)) for s, gb in rows] == [(s, round(b / GB, 1)) for s, b in enumerate(exact)]


def test_the_docs_bytes_table_is_the_codes() -> None:
    rows = doc_rows("| precision | optimizer | p | g | k |")
    table = {(p, o): (float(a), float(b), float(c)) for p, o, a, b, c in rows}
    assert table == {key: (v.params, v.grads, v.optimizer) for key, v in STATE_BYTES.items()}


def test_stages_with_other_precisions_and_optimizers() -> None:
    fp32 = TrainingFacts(1e9, precision="fp32", optimizer="adam", stage=1)  # 4 + 4 + 8 / Nd
    assert model_state_bytes(fp32, 4) == pytest.approx(10e9)
    sgd = TrainingFacts(1e9, precision="mixed", optimizer="sgd_momentum", stage=2)  # 2 + (2 + 8) / Nd
    assert model_state_bytes(sgd, 5) == pytest.approx(4e9)
    plain = TrainingFacts(1e9, precision="fp32", optimizer="sgd", stage=3)  # 8 / Nd
    assert model_state_bytes(plain, 8) == pytest.approx(1e9)
    assert model_state_bytes(PAPER, 1) == model_state_bytes(PAPER, 1024) == 120e9  # stage 0: no split


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"optimizer": "lamb"}, "no byte counts for mixed/lamb"),
        ({"precision": "fp8"}, "no byte counts for fp8/adam"),
        ({"stage": 4}, "ZeRO stage 4"),
        ({"parameters": 0}, "parameter count 0"),
    ],
)
def test_bad_facts_are_refused(kwargs: dict[str, object], problem: str) -> None:
    facts: dict[str, object] = {"parameters": 1e9} | kwargs
    with pytest.raises(ValueError, match=re.escape(problem)):
        TrainingFacts(**facts)  # type: ignore[arg-type]


def test_a_degree_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="data-parallel degree 0"):
        model_state_bytes(PAPER, 0)


def test_fewest_gpus_picks_the_smallest_degree_and_its_partition() -> None:
    facts = TrainingFacts(7.5e9, stage=3)  # 120 GB / Nd
    memory = {"v100": 16e9, "a100": 40e9}
    # 5 % headroom: a100 holds 38 GB of states, 120 / Nd <= 38 from Nd = 3.2: 4 among powers of
    # two; v100 holds 15.2 GB and needs 8.
    fit = fewest_gpus(facts, memory, headroom=0.05)
    assert fit is not None and (fit.partition, fit.gpus) == ("a100", 4)
    assert fit.need_bytes == pytest.approx(30e9) and fit.usable_bytes == pytest.approx(38e9)
    assert fit.margin_bytes == pytest.approx(8e9)
    anywhere = fewest_gpus(facts, memory, candidates=range(1, 65), headroom=0.05)
    assert anywhere is not None and (anywhere.partition, anywhere.gpus) == ("a100", 4)
    only_v100 = fewest_gpus(facts, {"v100": 16e9}, candidates=range(1, 65), headroom=0.2)
    assert only_v100 is not None and only_v100.gpus == 10  # 120 / 10 = 12 <= 12.8 GB; 9 needs 13.3


def test_fewest_gpus_stays_within_the_gpus_a_partition_holds() -> None:
    # 100 B parameters, ZeRO-3: 1600 GB / Nd, 32 GPUs of 80 GB less 10 % (50 <= 72 GB); a
    # partition of 8 GPUs cannot give 32, so nothing fits there.
    facts = TrainingFacts(100e9, stage=3)
    assert model_state_bytes(facts, 32) == pytest.approx(50e9)
    assert fewest_gpus(facts, {"gpu": 80e9}, most_gpus={"gpu": 8}) is None
    big = fewest_gpus(facts, {"gpu": 80e9, "big": 80e9}, most_gpus={"gpu": 8, "big": 64})
    assert big is not None and (big.partition, big.gpus) == ("big", 32)


def test_a_headroom_is_kept_free_of_model_states() -> None:
    # 4.99 B parameters, stage 0, mixed Adam: 79.84 GB of states on an 80 GB GPU. With the 10 %
    # default headroom (72 GB for states) it does not fit; without one it did, to 0.16 GB.
    facts = TrainingFacts(4.99e9, stage=0)
    assert HEADROOM == 0.1
    assert fewest_gpus(facts, {"gpu": 80e9}) is None
    tight = fewest_gpus(facts, {"gpu": 80e9}, headroom=0.0)
    assert tight is not None and tight.margin_bytes == pytest.approx(0.16e9)


def test_equal_degrees_go_to_the_larger_margin_and_nothing_may_fit() -> None:
    facts = TrainingFacts(7.5e9, stage=3)
    fit = fewest_gpus(facts, {"a100-40": 40e9, "a100-80": 80e9, "h100": 80e9})  # 72 GB: 60 on 2
    assert fit is not None and fit.gpus == 2 and fit.partition == "a100-80"  # ties keep the first
    assert fewest_gpus(PAPER, {"a100-80": 80e9}) is None  # stage 0: 120 GB on every GPU
    assert fewest_gpus(facts, {"a100-40": 40e9}, candidates=[1, 2]) is None
    assert POWERS_OF_TWO[0] == 1 and POWERS_OF_TWO[-1] == 1024


def test_the_advice_names_only_gpu_counts_of_the_partitions_compared() -> None:
    # One node of 8 GPUs of 80 GB; "other" has 80 GB GPUs too but is neither compared nor sized.
    shapes = {"gpu": PartitionShape("gpu", nodes=1, cpus=64, gpus=8, mem_mb=512000)}
    job = JobRequest(user_name="ann", job_name="llm", gpus_per_node=1)
    memory = {"gpu": 80e9, "other": 80e9}
    big = Ask(job, partitions=("gpu",), training=TrainingFacts(100e9, stage=3))
    advice = advise(big, [], Tariff.of(Prices()), shapes, memory)
    assert "the model states fit no GPU count the partitions compared hold" in advice.notes
    assert not any("32 in" in n for n in advice.notes)  # it named 32 GPUs in gpu, which has 8
    fits = Ask(job, training=TrainingFacts(3e9, stage=2))  # 6 + 42 / Nd GB: 48 on 1, 27 on 2 GPUs
    named = advise(fits, [], Tariff.of(Prices()), shapes, memory, gpu_memory_headroom=0.5)
    assert "the fewest GPUs that hold the model states: 2 in gpu (27.0 GB of 40.0 GB per GPU)" in named.notes
    one = next(o for o in named.options if o.size == 1)
    assert one.note == "model states need 48.0 GB per GPU; a GPU here holds 40.0 GB of them (80.0 less 50 %)"
