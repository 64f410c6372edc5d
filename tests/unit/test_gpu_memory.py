"""advice.gpu_memory: ZeRO's per-GPU model states (the paper's Figure 1), the fitted overhead,
and the fewest GPUs that hold a training."""

from __future__ import annotations

import re

import pytest

from slurm_harp.advice.gpu_memory import (
    POWERS_OF_TWO,
    STATE_BYTES,
    Overhead,
    TrainingFacts,
    fewest_gpus,
    model_state_bytes,
)
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


def test_overhead_is_the_largest_or_a_quantile_of_the_residuals() -> None:
    facts = TrainingFacts(1e9, stage=3)  # 16 GB of states: 2 GB a GPU on 8
    observed = [(facts, 8, 3e9), (facts, 8, 5e9), (facts, 8, 4e9)]  # residuals 1, 3 and 2 GB
    assert Overhead.fit(observed) == Overhead(per_gpu_bytes=3e9, observations=3)
    assert Overhead.fit(observed, quantile=0.5).per_gpu_bytes == pytest.approx(2e9)
    assert Overhead.fit(observed, quantile=0.4).per_gpu_bytes == pytest.approx(2e9)  # an observed one
    assert Overhead.fit([]) == Overhead(per_gpu_bytes=0.0, observations=0)
    assert Overhead.fit([(facts, 8, 1e9)]) == Overhead(per_gpu_bytes=0.0, observations=1)  # never negative
    with pytest.raises(ValueError, match="quantile"):
        Overhead.fit(observed, quantile=1.5)


def test_fewest_gpus_picks_the_smallest_degree_and_its_partition() -> None:
    facts = TrainingFacts(7.5e9, stage=3)  # 120 GB / Nd
    memory = {"v100": 16e9, "a100": 40e9}
    overhead = Overhead(per_gpu_bytes=2e9)
    # a100: 120 / Nd + 2 <= 40 from Nd = 3.2: 4 among powers of two; v100 needs 16.
    fit = fewest_gpus(facts, memory, overhead=overhead)
    assert fit is not None and (fit.partition, fit.gpus) == ("a100", 4)
    assert fit.need_bytes == pytest.approx(32e9) and fit.margin_bytes == pytest.approx(8e9)
    anywhere = fewest_gpus(facts, memory, candidates=range(1, 65), overhead=overhead)
    assert anywhere is not None and (anywhere.partition, anywhere.gpus) == ("a100", 4)
    only_v100 = fewest_gpus(facts, {"v100": 16e9}, candidates=range(1, 65), overhead=overhead)
    assert only_v100 is not None and only_v100.gpus == 9  # 120 / 9 + 2 = 15.3 GB
    assert fewest_gpus(facts, {"v100": 16e9}, overhead=overhead) == fewest_gpus(
        facts, {"v100": 16e9}, candidates=[16, 32], overhead=overhead
    )


def test_equal_degrees_go_to_the_larger_margin_and_nothing_may_fit() -> None:
    facts = TrainingFacts(7.5e9, stage=3)
    fit = fewest_gpus(facts, {"a100-40": 40e9, "a100-80": 80e9, "h100": 80e9})
    assert fit is not None and fit.gpus == 2 and fit.partition == "a100-80"  # ties keep the first
    assert fewest_gpus(PAPER, {"a100-80": 80e9}) is None  # stage 0: 120 GB on every GPU
    assert fewest_gpus(facts, {"a100-40": 40e9}, candidates=[1, 2]) is None
    assert POWERS_OF_TWO[0] == 1 and POWERS_OF_TWO[-1] == 1024
