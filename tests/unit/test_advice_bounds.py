"""What one advice call may cost (docs/advice.md, "Bounds"): partitions the site has, a bounded set
of sizes, a bounded label; and the shortcuts that make a thousand runs cheap give the answers of
their definitions."""

from __future__ import annotations

import math
import random

import pytest

from slurm_harp.advice.candidates import MOST_SIZES, MOST_UNKNOWN
from slurm_harp.advice.evidence import Evidence, Run
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.recommend import Ask, advise, undominated
from slurm_harp.advice.sizing import MEMORY_MARGIN, Memory
from slurm_harp.core.request import JobRequest
from tests.unit.test_recommend import CPU_HOURS, SHAPES, ask, run

WIDE = PartitionShape("wide", nodes=4, cpus=4096)


def test_a_partition_the_site_does_not_have_is_named_not_priced() -> None:
    runs = [run("ann", 1, 40), run("ann", 4, 30)]
    made_up = tuple(f"made-up-{i}" for i in range(60))
    advice = advise(Ask(ask().job, partitions=("batch", *made_up)), runs, CPU_HOURS, SHAPES)
    assert {o.partition for o in advice.options} == {"batch"}
    assert "no such partition here: made-up-0, made-up-1, made-up-2 and 57 more" in advice.notes


def test_the_jobs_own_partition_the_site_does_not_have_is_named_not_priced() -> None:
    # `-p nosuch` on the job: it was put first and priced on trust, and could be the cheapest.
    runs = [run("ann", 1, 40), run("ann", 4, 30)]
    advice = advise(ask(partition="nosuch"), runs, CPU_HOURS, SHAPES)
    assert {o.partition for o in advice.options} == {"batch"}
    assert "no such partition here: nosuch" in advice.notes
    # Its own partitions the site has come first, in the job's order (`-p a,b`); none known: on trust.
    three = {"a": SHAPES["batch"], "b": SHAPES["batch"], "c": SHAPES["batch"]}
    options = advise(ask(partition="c,nosuch,a"), runs, CPU_HOURS, three).options
    assert list(dict.fromkeys(o.partition for o in options)) == ["c", "a", "b"]
    assert {o.partition for o in advise(ask(partition="nosuch"), runs, CPU_HOURS, {}).options} == {"nosuch"}


def test_when_no_partition_is_known_a_few_named_ones_are_taken_on_trust() -> None:
    runs = [run("ann", 1, 40), run("ann", 4, 30)]
    named = tuple(f"p{i}" for i in range(10))
    advice = advise(Ask(ask().job, partitions=named), runs, CPU_HOURS, {})
    assert sorted({o.partition for o in advice.options}) == list(named[:MOST_UNKNOWN])
    assert f"no partition is known here: the first {MOST_UNKNOWN} of those named are compared" in advice.notes


def test_of_many_sizes_run_the_most_run_are_candidates() -> None:
    # 100 sizes run, size 100 most often; then 1..15 twice each; the rest once.
    sizes = [100] * 5 + [s for s in range(1, 16) for _ in range(2)] + list(range(16, 100))
    runs = [run("ann", s, 600 / s + 5) for s in sizes]
    advice = advise(ask(min_cpus=48), runs, CPU_HOURS, {"wide": WIDE})
    candidates = {o.size for o in advice.options}
    powers = {2**i for i in range(11)}
    assert candidates == powers | {100, *range(1, 16), 48}
    assert len(candidates - powers) <= MOST_SIZES + 1  # the size asked for besides
    assert f"of the 100 sizes run, the {MOST_SIZES} run most often are compared" in advice.notes
    assert advice.evidence.describe().endswith(", 103 at 92 other sizes")  # 8 sizes named, the rest counted


def test_the_pareto_shortcut_keeps_what_the_definition_keeps() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        points = [
            (rng.choice([1.0, 2.0, 3.0]), rng.choice([10.0, 20.0, 30.0])) for _ in range(rng.randint(1, 9))
        ]
        dominated = {
            i for i, (c, m) in enumerate(points)
            if any(qc <= c and qm <= m and (qc < c or qm < m) for qc, qm in points)
        }  # fmt: skip
        assert undominated(points) == [i for i in range(len(points)) if i not in dominated], points


def test_memory_by_bisection_is_the_least_of_each_size_per_nodes_bound() -> None:
    rng = random.Random(3)
    for _ in range(500):
        runs = tuple(
            Run(size=rng.randint(1, 64), minutes=1.0, nodes=rng.randint(1, 4),
                peak_mb=rng.choice([None, 0.0, rng.uniform(1, 5000), float(rng.randint(1, 300))]))
            for _ in range(rng.randint(1, 12))
        )  # fmt: skip
        peaked = [r for r in runs if r.peak_mb]
        memory = Memory.of(Evidence(runs), JobRequest(), 0.0)
        for size in range(1, 70, 3):
            for nodes in (1, 2, 3):
                if not peaked:
                    assert memory.per_node(size, nodes) == 0.0
                    continue
                each: dict[float, float] = {}  # size per node -> its largest bound
                for r in peaked:
                    theirs = r.size / r.nodes
                    bound = (r.peak_mb or 0.0) * max(1.0, (size / nodes) / theirs)
                    each[theirs] = max(each.get(theirs, 0.0), bound)
                assert memory.per_node(size, nodes) == math.ceil(min(each.values()) * MEMORY_MARGIN)


@pytest.mark.parametrize("partitions", [8, 64])
def test_a_heavy_ask_prices_a_bounded_number_of_options(partitions: int) -> None:
    runs = [run("ann", 1 + i % 100, 6000 / (1 + i % 100) + 60) for i in range(1000)]
    shapes = {f"p{i}": PartitionShape(f"p{i}", nodes=8, cpus=1024) for i in range(partitions)}
    advice = advise(Ask(ask().job, partitions=tuple(shapes)), runs, CPU_HOURS, shapes)
    assert len(advice.options) <= partitions * (11 + MOST_SIZES + 1)
    assert len(advice.evidence.describe()) < 200
    sizes_note = [n for n in advice.notes if n.startswith("of the 100 sizes run")]
    assert len(sizes_note) == 1 and len(advice.notes) == len(set(advice.notes)) == 2  # said once
    assert "memory is not priced" in advice.notes[0]  # no run's peak or request is known
