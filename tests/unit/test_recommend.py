"""advice.recommend: candidates, the scaling fit, the answers and their evidence, computed by hand."""

from __future__ import annotations

import itertools
import math
import time

import pytest

from slurm_harp.advice.billing import parse_weights
from slurm_harp.advice.evidence import Run
from slurm_harp.advice.gpu_memory import TrainingFacts
from slurm_harp.advice.option import Option
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.sizing import Scaling
from slurm_harp.advice.survival import Empirical, PointMasses
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

BATCH = PartitionShape("batch", nodes=1, cpus=4, mem_mb=16000)
SHAPES = {"batch": BATCH}
CPU_HOURS = Tariff.of(Prices())  # 1 per CPU-hour: a cost is CPUs x hours


IDS = itertools.count(1)


def run(
    user: str,
    cpus: int,
    minutes: float,
    state: str = "COMPLETED",
    *,
    signature: str | None = None,
    gpus: int | None = None,
    user_id: int | None = None,
    max_rss_mb: float | None = None,
) -> JobRecord:
    """One of ``user``'s runs of "sim"."""
    request = JobRequest(
        user_name=user, user_id=user_id, job_name="sim", min_cpus=cpus, script_signature=signature,
        gpus_per_node=gpus,
    )  # fmt: skip
    return JobRecord(
        job_id=str(next(IDS)), request=request, state=state, elapsed_s=round(minutes * 60), alloc_cpus=cpus,
        max_rss_mb=max_rss_mb,
    )  # fmt: skip


def ask(**job: object) -> Ask:
    return Ask(JobRequest(**{"user_name": "ann", "job_name": "sim", "min_cpus": 1, **job}))  # type: ignore[arg-type]


def option(advice: Advice, size: int, partition: str = "batch") -> Option:
    return next(o for o in advice.options if o.size == size and o.partition == partition)


# Ann ran "sim" twice on 1 CPU (40 and 90 min: geometric mean 60) and once on 4 CPUs (30 min).
# The log-log fit goes through the two sizes' mean logs: slope log(30/60)/log(4) = -1/2,
# intercept log 60; residual factors 2/3 and 3/2 on 1 CPU, 1 on 4 CPUs.
ANN = [run("ann", 1, 40), run("ann", 1, 90), run("ann", 4, 30)]


def test_the_log_log_fit_and_its_residual_factors() -> None:
    scaling = Scaling.fit([Run(1, 40), Run(1, 90), Run(4, 30)])
    assert scaling is not None
    assert scaling.slope == pytest.approx(-0.5) and scaling.intercept == pytest.approx(math.log(60))
    assert [math.exp(r) for r in scaling.residuals] == pytest.approx([2 / 3, 3 / 2, 1])
    assert scaling.minutes(1) == pytest.approx((40, 90, 60))
    assert scaling.minutes(4) == pytest.approx((20, 45, 30))
    two = 60 / math.sqrt(2)
    assert scaling.minutes(2) == pytest.approx((two * 2 / 3, two * 3 / 2, two))
    assert scaling.minutes(8) is None  # no extrapolation past the sizes run


def test_cheapest_fastest_and_pareto_by_hand() -> None:
    advice = advise(ask(), ANN, CPU_HOURS, SHAPES)
    one, two, four = option(advice, 1), option(advice, 2), option(advice, 4)
    assert advice.evidence.describe() == "2 runs at 1 CPU, 1 at 4 CPUs"
    assert one.evidence == "fit of 2 runs at 1 CPU, 1 at 4 CPUs"
    # 1 CPU, run times 40, 90, 60: limits 44, 99 or 66; 99 lets all finish: 63.33 min at 1/h.
    assert one.limit_minutes == 99 and one.expected_minutes == pytest.approx(190 / 3)
    assert one.expected_cost == pytest.approx(190 / 3 / 60)
    assert one.longest_minutes == pytest.approx(90)
    # 2 CPUs, run times 28.28, 63.64, 42.43: limit ceil(1.1 x 63.64) = 71, mean 44.78 min at 2/h.
    mean_two = 60 / math.sqrt(2) * (2 / 3 + 3 / 2 + 1) / 3
    assert two.limit_minutes == 71 and two.expected_minutes == pytest.approx(mean_two)
    assert two.expected_cost == pytest.approx(2 * mean_two / 60)
    # 4 CPUs, run times 20, 45, 30: limit 50; at 33 the 45-minute run would cost 33 + 45 more.
    assert four.limit_minutes == 50 and four.expected_minutes == pytest.approx(95 / 3)
    assert four.expected_cost == pytest.approx(4 * 95 / 3 / 60)
    assert advice.cheapest is one and advice.fastest is four
    assert advice.pareto == (one, two, four)  # cost up, time down: none beats another on both
    assert [o.size for o in advice.options] == [1, 2, 4]  # 4 CPUs is the partition's most


# Bob ran "sim" on 1 CPU for 20 and 30 min and on 4 CPUs for 60: larger took longer (slope > 0),
# so the runs did different work and the fit says nothing of how the size changes the run time.
BOB = [run("bob", 1, 20), run("bob", 1, 30), run("bob", 4, 60)]


def test_a_fit_where_larger_runs_took_longer_compares_no_sizes() -> None:
    advice = advise(ask(user_name="bob", min_cpus=4), BOB, CPU_HOURS, SHAPES)
    four = option(advice, 4)
    # The size asked for is priced by its own run as it is: 60 min, limit 66, 4 CPUs for an hour.
    assert four.evidence == "1 run at this size" and four.limit_minutes == 66
    assert four.expected_minutes == pytest.approx(60) and four.expected_cost == pytest.approx(4.0)
    for size in (1, 2):  # 1 CPU would look cheaper and faster on the fit: not compared
        other = option(advice, size)
        assert not other.priced and other.evidence == "not compared"
        assert other.note == "your runs at more CPUs took no less time"
    assert advice.cheapest is four and advice.fastest is four and advice.pareto == (four,)
    assert any(
        "sizes are not compared; only the size you asked for (4 CPUs) is priced" in n for n in advice.notes
    )


def test_a_fit_that_does_not_scale_prices_a_size_between_by_the_fit() -> None:
    advice = advise(ask(user_name="bob", min_cpus=2), BOB, CPU_HOURS, SHAPES)
    two = option(advice, 2)
    scaling = Scaling.fit([Run(1, 20), Run(1, 30), Run(4, 60)])
    assert scaling is not None and scaling.slope > 0 and not scaling.scales
    expected = scaling.minutes(2)
    assert expected is not None and two.evidence.startswith("fit of")
    assert two.expected_minutes == pytest.approx(sum(expected) / 3)
    assert [o.size for o in advice.options if o.priced] == [2]


def test_a_fit_that_does_not_scale_and_no_size_asked_prices_nothing() -> None:
    advice = advise(ask(user_name="bob", min_cpus=None), BOB, CPU_HOURS, SHAPES)
    assert not any(o.priced for o in advice.options)
    assert advice.cheapest is None and advice.fastest is None and advice.pareto == ()
    assert any("give the CPUs you would ask for to price them" in n for n in advice.notes)


def test_only_a_negative_slope_over_two_sizes_scales() -> None:
    assert Scaling.fit([Run(1, 40), Run(1, 90), Run(4, 30)]).scales  # type: ignore[union-attr]
    assert not Scaling.fit([Run(2, 10), Run(2, 14)]).scales  # type: ignore[union-attr]
    assert not Scaling.fit([Run(1, 10), Run(4, 10)]).scales  # type: ignore[union-attr]  # slope 0


def test_a_deadline_and_a_budget() -> None:
    # The longest runs: 90 min on 1 CPU, 63.64 on 2, 45 on 4.
    timed = advise(Ask(ask().job, deadline_minutes=60), ANN, CPU_HOURS, SHAPES)
    assert timed.cheapest is not None and timed.cheapest.size == 4
    budget = advise(Ask(ask().job, budget=1.5), ANN, CPU_HOURS, SHAPES)  # 2 CPUs cost 1.49
    assert budget.fastest is not None and budget.fastest.size == 2
    nothing = advise(Ask(ask().job, deadline_minutes=30, budget=0.5), ANN, CPU_HOURS, SHAPES)
    assert nothing.cheapest is None and nothing.fastest is None
    assert any("deadline of 30 min" in n for n in nothing.notes)
    assert any("budget of 0.5 billing-hours" in n for n in nothing.notes)


def test_one_size_only_is_evidence_for_that_size_alone() -> None:
    runs = [run("ann", 2, 10), run("ann", 2, 14)]
    advice = advise(ask(min_cpus=2), runs, CPU_HOURS, SHAPES)
    two = option(advice, 2)
    assert two.evidence == "2 runs at 2 CPUs"
    # Limits 11 or 16: at 11 the 14-minute run is killed and run again (11 + 14).
    assert two.limit_minutes == 16 and two.expected_minutes == pytest.approx(12)
    for size in (1, 4):
        assert option(advice, size).evidence == "no evidence" and not option(advice, size).priced
    assert advice.cheapest is two and advice.fastest is two and advice.pareto == (two,)


def test_another_users_runs_are_never_evidence() -> None:
    bob = [run("bob", 4, 1), run("bob", 1, 1)]
    advice = advise(ask(), [*bob, run("ann", 2, 10)], CPU_HOURS, SHAPES)
    assert advice.evidence.describe() == "1 run at 2 CPUs"
    assert [o.size for o in advice.options if o.priced] == [2]
    assert advise(ask(), bob, CPU_HOURS, SHAPES).evidence.runs == ()
    # No user (the server always sets the caller): nothing at all.
    assert advise(ask(user_name=None), [*bob, *ANN], CPU_HOURS, SHAPES).evidence.runs == ()
    # Another user's job of the same id and name under a different uid does not count either.
    assert advise(ask(user_id=1000), [run("ann", 1, 5, user_id=1001)], CPU_HOURS, SHAPES).evidence.runs == ()


def test_runs_that_did_not_complete_are_counted_not_used() -> None:
    runs = [run("ann", 1, 30), run("ann", 2, 5, state="FAILED"), run("ann", 2, 60, state="TIMEOUT")]
    advice = advise(ask(), runs, CPU_HOURS, SHAPES)
    assert advice.evidence.describe() == "1 run at 1 CPU"
    assert "runs not used (they did not complete): 1 FAILED, 1 TIMEOUT" in advice.notes


def test_runs_with_the_scripts_signature_win_over_the_name() -> None:
    runs = [run("ann", 1, 30, signature="aa"), run("ann", 2, 5, signature="bb"), run("ann", 4, 2)]
    by_script = advise(ask(script_signature="aa"), runs, CPU_HOURS, SHAPES)
    assert by_script.evidence.describe() == "1 run at 1 CPU"
    assert "runs matched by script signature and name" in by_script.notes
    by_name = advise(ask(script_signature="cc"), runs, CPU_HOURS, SHAPES)
    assert by_name.evidence.describe() == "1 run at 1 CPU, 1 at 2 CPUs, 1 at 4 CPUs"
    assert "runs matched by name (none has this script's signature)" in by_name.notes


def test_runs_that_record_no_signature_say_nothing_of_the_script() -> None:
    """Runs harvested from sacct record no script: every advice on a script said "runs matched by
    name (none has this script's signature)", as if the user's runs had run other scripts."""
    runs = [run("ann", 1, 30), run("ann", 2, 5)]
    advice = advise(ask(script_signature="aa"), runs, CPU_HOURS, SHAPES)
    assert advice.evidence.describe() == "1 run at 1 CPU, 1 at 2 CPUs"
    assert not any("signature" in note for note in advice.notes)


def test_memory_from_the_peaks_and_the_nodes_that_hold_it() -> None:
    # 1000 MB peak on 2 CPUs: at most that on 1 CPU, twice that on 4 (in proportion); plus 20 %.
    runs = [run("ann", 2, 10, max_rss_mb=1000.0)]
    priced = Tariff.of(Prices(partitions=(PartitionPrice("batch", weights=parse_weights("CPU=1,Mem=1G")),)))
    shapes = {"batch": PartitionShape("batch", nodes=1, cpus=4, mem_mb=2000)}
    advice = advise(ask(min_cpus=2), runs, priced, shapes)
    two = option(advice, 2)
    assert two.mem_per_node_mb == 1200 and two.allocation.mem_mb == 1200
    assert two.quote is not None and two.quote.billed_units == pytest.approx(2 + 1200 / 1024)
    assert option(advice, 1).mem_per_node_mb == 1200
    four = option(advice, 4)
    assert four.mem_per_node_mb == 2400 and not four.priced
    assert four.note == "needs 2400 MB per node; a node has 2000 MB"
    # Runs at two sizes bound it from both sides: 1000 MB on 2 CPUs, 1500 on 4.
    both = [*runs, run("ann", 4, 6, max_rss_mb=1500.0)]
    eight = {"batch": PartitionShape("batch", nodes=1, cpus=8, mem_mb=8000)}
    bounded = advise(ask(min_cpus=2), both, CPU_HOURS, eight)
    assert [option(bounded, n).mem_per_node_mb for n in (1, 2, 4, 8)] == [1200, 1200, 1800, 3600]
    # A floor (harp.toml's policy.floor.memory_mb) under the peaks.
    floored = advise(ask(min_cpus=2), runs, priced, shapes, memory_floor_mb=1500)
    assert option(floored, 1).mem_per_node_mb == 1500 and option(floored, 2).mem_per_node_mb == 1500
    # No peak known: the job's own request (per CPU here).
    no_peak = advise(ask(min_cpus=2, mem_per_cpu_mb=500), [run("ann", 2, 10)], CPU_HOURS, SHAPES)
    assert option(no_peak, 2).mem_per_node_mb == 1000


def test_candidates_span_the_partitions_on_the_fewest_nodes() -> None:
    wide = PartitionShape("wide", nodes=4, cpus=64, max_nodes=2, max_minutes=60)
    tariff = Tariff.of(Prices(partitions=(PartitionPrice("wide", price=0.5),)))
    runs = [run("ann", 2, 10), run("ann", 32, 1)]
    advice = advise(ask(partition="wide"), runs, tariff, {"batch": BATCH, "wide": wide})
    assert [(o.partition, o.size) for o in advice.options] == [
        *[("wide", 2**i) for i in range(6)],  # 16 CPUs a node, 2 nodes a job at most
        *[("batch", 2**i) for i in range(3)],
    ]
    assert option(advice, 32, "wide").allocation.nodes == 2
    assert option(advice, 16, "wide").allocation.nodes == 1
    only = advise(Ask(ask().job, partitions=("batch",)), runs, tariff, {"batch": BATCH, "wide": wide})
    assert {o.partition for o in only.options} == {"batch"}
    # Half the price per CPU-hour: the same run costs half in wide.
    cost_wide, cost_batch = option(advice, 2, "wide").expected_cost, option(advice, 2).expected_cost
    assert cost_wide is not None and cost_batch is not None and cost_wide == pytest.approx(cost_batch / 2)
    # A partition known only by name (no size): the sizes run and asked for, and what lies between.
    unknown = advise(Ask(ask().job, partitions=("lost",)), runs, CPU_HOURS, {})
    assert [o.size for o in unknown.options] == [1, 2, 4, 8, 16, 32]
    assert any("partition lost: its size is unknown" in n for n in unknown.notes)


def test_a_run_longer_than_maxtime_is_no_answer() -> None:
    short = PartitionShape("short", nodes=1, cpus=4, max_minutes=30)
    advice = advise(ask(), [run("ann", 1, 40), run("ann", 2, 20)], CPU_HOURS, {"short": short})
    one = option(advice, 1, "short")
    assert one.quote is not None and one.quote.p_unfinished == 1.0 and one.longest_minutes == math.inf
    assert one.note == "runs past the partition's MaxTime: cannot finish"
    assert advice.cheapest is option(advice, 2, "short") and one not in advice.pareto


def test_perfect_scaling_ties_go_to_the_faster() -> None:
    # 60 min on 1 CPU, 15 on 4: every size costs one CPU-hour; the fastest of equal costs wins.
    advice = advise(ask(), [run("ann", 1, 60), run("ann", 4, 15)], CPU_HOURS, SHAPES)
    costs = [o.expected_cost for o in advice.options]
    assert costs == pytest.approx([1.0, 1.0, 1.0])
    assert advice.cheapest is option(advice, 4) and advice.pareto == (option(advice, 4),)


def test_no_name_or_no_runs_says_no_evidence() -> None:
    advice = advise(ask(job_name=None), ANN, CPU_HOURS, SHAPES)
    assert all(o.evidence == "no evidence" for o in advice.options) and advice.cheapest is None
    assert "the job has no name: HARP finds its history by its name (sbatch -J)" in advice.notes
    fresh = advise(ask(job_name="new"), ANN, CPU_HOURS, SHAPES)
    assert "no completed run of 'new' by ann: no evidence for any option" in fresh.notes


GPU = PartitionShape("gpu", nodes=2, cpus=128, gpus=16, mem_mb=1024000)


def test_gpu_jobs_scale_by_gpus_and_the_model_states_must_fit() -> None:
    # 7.5 B parameters, mixed-precision Adam, ZeRO stage 2: 15 GB + 105 GB / N per GPU:
    # 120, 67.5, 41.25 and 28.1 GB on 1, 2, 4 and 8 GPUs; a 40 GB GPU less 10 % holds it from 8 on.
    facts = TrainingFacts(parameters=7.5e9, stage=2)
    runs = [run("ann", 16, 100, gpus=2), run("ann", 64, 30, gpus=8)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=16, gpus_per_node=2)
    advice = advise(Ask(job, training=facts), runs, CPU_HOURS, {"gpu": GPU}, {"gpu": 40e9})
    assert advice.evidence.describe() == "1 run at 2 GPUs, 1 at 8 GPUs"
    assert [o.size for o in advice.options] == [1, 2, 4, 8, 16]
    four = option(advice, 4, "gpu")
    assert not four.priced and four.note == (
        "model states need 41.2 GB per GPU; a GPU here holds 36.0 GB of them (40.0 less 10 %)"
    )
    eight = option(advice, 8, "gpu")
    assert eight.priced and eight.allocation.gpus == 8 and eight.allocation.cpus == 64  # 8 CPUs a GPU
    assert eight.allocation.nodes == 1 and option(advice, 16, "gpu").allocation.nodes == 2
    assert option(advice, 16, "gpu").evidence == "no evidence"
    assert advice.cheapest is eight
    assert "the fewest GPUs that hold the model states: 8 in gpu (28.1 GB of 36.0 GB per GPU)" in advice.notes
    # The CPU partition has no GPUs for it.
    both = advise(Ask(job), runs, CPU_HOURS, {"gpu": GPU, "batch": BATCH})
    assert "partition batch: has no GPUs for this job" in both.notes


def test_the_empirical_run_time_is_point_masses_by_bisection() -> None:
    values = [3.0, 1.0, 7.5, 3.0, 12.0]
    fast, slow = Empirical(values), PointMasses(values, [0.2] * 5)
    for t in (0, 1, 2.9, 3, 3.1, 12, 13):
        assert fast.survival(t) == pytest.approx(slow.survival(t))
        for high in (0, 1, 3, 7.5, 20):
            assert fast.partial_mean(t, high) == pytest.approx(slow.partial_mean(t, high))


@pytest.mark.alone  # times itself against the wall clock (scripts/test)
def test_a_thousand_runs_over_many_partitions_are_advised_quickly() -> None:
    runs = [run("ann", 1 if i % 2 else 1024, 10 + i % 97) for i in range(1000)]
    shapes = {f"p{i}": PartitionShape(f"p{i}", nodes=16, cpus=1024) for i in range(8)}
    started = time.perf_counter()
    advice = advise(ask(), runs, CPU_HOURS, shapes)
    assert sum(o.priced for o in advice.options) == 8 * 11
    assert time.perf_counter() - started < 2.0
