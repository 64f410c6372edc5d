"""The advice bills what slurmctld bills: typed GPUs, memory no run measured, GPU jobs' memory per CPU.

The partitions are faked at one boundary, the text ``scontrol show partition`` prints."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from slurm_harp.advice.partition_shape import shapes_from_scontrol
from slurm_harp.advice.partition_table import from_scontrol
from slurm_harp.advice.quote import Allocation
from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.tariff import Prices, Tariff
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

IDS = itertools.count(1)

# One node of 8 A100s, billed by their type: 16 a GPU, 1 a CPU.
TYPED_GPUS = (
    "PartitionName=a100 AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL MaxNodes=UNLIMITED "
    "MaxTime=1-00:00:00 State=UP TotalCPUs=64 TotalNodes=1 "
    "TRES=cpu=64,mem=512000M,node=1,billing=192,gres/gpu=8,gres/gpu:a100=8 "
    "TRESBillingWeights=CPU=1.0,GRES/gpu:a100=16.0\n"
)


def record(
    cpus: int, minutes: float, *, gpus: int | None = None, peak_mb: float | None = None, **request: object
) -> JobRecord:
    """One of ann's completed runs of "sim" (``peak_mb``: its MaxRSS a node)."""
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=cpus, gpus_per_node=gpus, **request)  # type: ignore[arg-type]
    return JobRecord(
        job_id=str(next(IDS)), request=job, state="COMPLETED", elapsed_s=round(minutes * 60), alloc_cpus=cpus,
        max_rss_mb=peak_mb,
    )  # fmt: skip


def advice_in(scontrol: str, job: JobRequest, runs: list[JobRecord]) -> Advice:
    return advise(
        Ask(job), runs, Tariff.of(Prices(), from_scontrol(scontrol)), shapes_from_scontrol(scontrol)
    )


def test_typed_gpus_are_billed_by_their_type() -> None:
    # 4 A100s beside 8 CPUs: slurmctld's job TRES holds gres/gpu=4 and gres/gpu:a100=4, so
    # 8 x 1 + 4 x 16 = 72 billed units (the untyped gres/gpu alone gave 8).
    runs = [record(2, 200, gpus=1), record(8, 60, gpus=4)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=8, gpus_per_node=4)
    four = next(o for o in advice_in(TYPED_GPUS, job, runs).options if o.size == 4)
    assert four.quote is not None and four.quote.billed_units == pytest.approx(72.0)
    assert four.allocation.tres()["gres/gpu:a100"] == 4.0
    assert shapes_from_scontrol(TYPED_GPUS)["a100"].gpu_type == "a100"


def test_gpus_of_several_types_or_none_stay_untyped() -> None:
    # A job may get either type: which one slurmctld bills is not known before it runs.
    mixed = TYPED_GPUS.replace("gres/gpu:a100=8", "gres/gpu:a100=4,gres/gpu:v100=4")
    assert shapes_from_scontrol(mixed)["a100"].gpu_type is None
    assert shapes_from_scontrol(TYPED_GPUS.replace(",gres/gpu:a100=8", ""))["a100"].gpu_type is None
    assert "gres/gpu:a100" not in Allocation(cpus=8, gpus=4).tres()
    assert "gres/gpu:a100" not in Allocation(cpus=8, gpus=0, gpu_type="a100").tres()


# Two partitions of 4 nodes of 32 CPUs: std bills memory (a quarter unit a GiB), himem only CPUs.
STD_AND_HIMEM = (
    "PartitionName=std MaxTime=1-00:00:00 State=UP TotalCPUs=128 TotalNodes=4 "
    "TRES=cpu=128,mem=2048000M,node=4 TRESBillingWeights=CPU=1.0,Mem=0.25G\n"
    "PartitionName=himem MaxTime=1-00:00:00 State=UP TotalCPUs=128 TotalNodes=4 "
    "TRES=cpu=128,mem=8192000M,node=4 TRESBillingWeights=CPU=1.5\n"
)


def test_memory_no_run_measured_is_the_runs_own_request() -> None:
    # The runs asked 8000 MB a CPU and no peak is known: at 4 CPUs Slurm gave and billed 32000 MB,
    # 4 + 32000 / 1024 x 0.25 = 11.81 units in std against 6 in himem (std was billed 4: no memory).
    runs = [record(4, 60, mem_per_cpu_mb=8000), record(4, 66, mem_per_cpu_mb=8000)]
    advice = advice_in(STD_AND_HIMEM, JobRequest(user_name="ann", job_name="sim", min_cpus=4), runs)
    std = next(o for o in advice.options if o.partition == "std" and o.size == 4)
    assert std.quote is not None and std.quote.billed_units == pytest.approx(4 + 32000 / 1024 * 0.25)
    assert std.mem_per_node_mb == 32000
    assert advice.cheapest is not None and advice.cheapest.partition == "himem"
    # Runs that asked per node keep that per node; the ask's own memory comes first.
    per_node = [record(4, 60, mem_per_node_mb=6000)]
    assert (
        next(
            o
            for o in advice_in(
                STD_AND_HIMEM, JobRequest(user_name="ann", job_name="sim", min_cpus=4), per_node
            ).options
            if o.partition == "std"
        ).mem_per_node_mb
        == 6000
    )
    own = JobRequest(user_name="ann", job_name="sim", min_cpus=4, mem_per_node_mb=5000)
    assert all(o.mem_per_node_mb == 5000 for o in advice_in(STD_AND_HIMEM, own, runs).options)


def test_memory_nothing_says_is_not_priced_and_a_note_says_so() -> None:
    runs = [record(4, 60), record(4, 66)]
    advice = advice_in(STD_AND_HIMEM, JobRequest(user_name="ann", job_name="sim", min_cpus=4), runs)
    assert all(o.allocation.mem_mb == 0 for o in advice.options)
    assert "memory is not priced: no run's peak or request is known, nor yours" in advice.notes
    assert not any(
        "memory" in n
        for n in advice_in(
            STD_AND_HIMEM,
            JobRequest(user_name="ann", job_name="sim", min_cpus=4),
            [record(4, 60, mem_per_cpu_mb=1000)],
        ).notes
    )


# Two nodes of 64 CPUs and 8 GPUs.
GPUS = (
    "PartitionName=gpu MaxTime=1-00:00:00 State=UP TotalCPUs=128 TotalNodes=2 "
    "TRES=cpu=128,mem=1024000M,node=2,gres/gpu=16 TRESBillingWeights=CPU=1,Mem=0.25G,GRES/gpu=4\n"
)


def test_a_gpu_jobs_memory_per_cpu_follows_the_options_cpus() -> None:
    # --mem-per-cpu=4000 with 8 CPUs a GPU, no peak known: 4 GPUs hold 32 CPUs on one node,
    # 128000 MB (it was 32000 MB, the 8 CPUs asked for, at every GPU count).
    runs = [record(8, 200, gpus=1), record(8, 210, gpus=1), record(32, 60, gpus=4), record(32, 64, gpus=4)]
    job = JobRequest(user_name="ann", job_name="sim", gpus_per_node=1, min_cpus=8, mem_per_cpu_mb=4000)
    memory = {o.size: (o.allocation.cpus, o.mem_per_node_mb) for o in advice_in(GPUS, job, runs).options}
    assert memory[1] == (8, 32000) and memory[2] == (16, 64000) and memory[4] == (32, 128000)
    assert memory[16] == (128, 256000)  # two nodes of 64 CPUs each


# Four nodes of 64 CPUs and 8 GPUs, a GPU billed as 8 CPUs
GPUS_BY_8 = (
    "PartitionName=gpu State=UP TotalNodes=4 TotalCPUs=256 MaxTime=2-00:00:00 "
    "TRES=cpu=256,mem=2000000M,node=4,gres/gpu=32 TRESBillingWeights=CPU=1.0,GRES/gpu=8.0\n"
)


@pytest.mark.parametrize(("cpus", "billed"), [(6, 38), (3, 35), (1, 33)])
def test_a_gpu_jobs_own_size_holds_its_own_cpus(cpus: int, billed: float) -> None:
    """4 GPUs beside 6 CPUs bill 6 + 4 x 8 = 38 units (3: 35, 1: 33). The CPUs a GPU were a whole
    number, 6 // 4 = 1 (at least 1): all three were priced on 4 CPUs, 36 units. Other sizes hold as
    many CPUs a GPU, rounded up: 6 on 4 GPUs are 2 on 1, 3 on 2 and 12 on 8."""
    runs = [record(cpus, 60, gpus=4), record(cpus, 62, gpus=4)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=cpus, gpus_per_node=4)
    options = advice_in(GPUS_BY_8, job, runs).options
    four = next(o for o in options if o.size == 4)
    assert four.allocation.cpus == cpus and four.quote is not None and four.quote.billed_units == billed
    if cpus == 6:
        assert {o.size: o.allocation.cpus for o in options if o.size <= 8} == {1: 2, 2: 3, 4: 6, 8: 12}
        # Not said by the job: its runs' CPUs a GPU, as exact
        unsaid = JobRequest(user_name="ann", job_name="sim", gpus_per_node=4)
        assert next(o for o in advice_in(GPUS_BY_8, unsaid, runs).options if o.size == 4).allocation.cpus == 6


# One node of 32 CPUs and 128000 MB, billed a unit a CPU and a unit a GiB.
WHOLE_NODE = (
    "PartitionName=batch MaxTime=1-00:00:00 State=UP TotalCPUs=32 TotalNodes=1 "
    "TRES=cpu=32,mem=128000M,node=1 TRESBillingWeights=CPU=1.0,Mem=1G\n"
)


def test_mem_0_is_all_of_a_nodes_memory_and_is_billed_so() -> None:
    # --mem=0: Slurm gives the job all of the node's memory and bills it. It was priced as 0 MB
    # (4 units an hour, not 4 + 125) and `harp advise` printed "default", --mem left out.
    runs = [record(4, 60), record(4, 66)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4, mem_per_node_mb=0)
    advice = advice_in(WHOLE_NODE, job, runs)
    four = next(o for o in advice.options if o.size == 4)
    assert four.mem_per_node_mb == 128000
    assert four.quote is not None and four.quote.billed_units == pytest.approx(4 + 128000 / 1024)
    assert (
        "--mem=0 asks all of a node's memory: it is priced as a node of each partition holds" in advice.notes
    )
    # A node's memory unknown: not priced, and a note says so (not silently the default).
    unknown = advice_in(WHOLE_NODE.replace("mem=128000M,", ""), job, runs)
    assert all(o.allocation.mem_mb == 0 for o in unknown.options)
    assert "partition batch: a node's memory is unknown, so --mem=0 is not priced" in unknown.notes
    # A peak known sizes the memory as ever: --mem=0 is what is cut.
    peaked = [record(4, 60, peak_mb=1000), record(4, 66, peak_mb=1000)]
    assert next(o for o in advice_in(WHOLE_NODE, job, peaked).options if o.size == 4).mem_per_node_mb == 1200


def test_a_node_holds_the_memory_its_nodes_give_a_job_not_its_tres() -> None:
    """MemSpecLimit keeps memory from jobs: slurmctld gives a job at most RealMemory less it (sbatch
    --test-only refuses a MB more: tests/e2e/test_advise_node_size_e2e.py), where the partition's
    TRES counts RealMemory whole. Priced by the TRES, --mem=0 was billed 8000 MB it never gets, and
    a need the nodes cannot hold was proposed as a --mem that never runs."""
    runs = [record(4, 60), record(4, 66)]
    whole = JobRequest(user_name="ann", job_name="sim", min_cpus=4, mem_per_node_mb=0)
    shapes = {"batch": replace(shapes_from_scontrol(WHOLE_NODE)["batch"], node_mem_mb=120000.0)}

    def advice(job: JobRequest, runs: list[JobRecord]) -> Advice:
        return advise(Ask(job), runs, Tariff.of(Prices(), from_scontrol(WHOLE_NODE)), shapes)

    four = next(o for o in advice(whole, runs).options if o.size == 4)
    assert four.mem_per_node_mb == 120000
    assert four.quote is not None and four.quote.billed_units == pytest.approx(4 + 120000 / 1024)
    # 101000 MB peaks: 121200 MB with the margin fit the TRES's 128000 MB a node, not the node.
    big = [record(4, 60, peak_mb=101000), record(4, 66, peak_mb=101000)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4)
    over = next(o for o in advice(job, big).options if o.size == 4)
    assert not over.priced and over.note == "needs 121200 MB per node; a node has 120000 MB"
    assert next(o for o in advice_in(WHOLE_NODE, job, big).options if o.size == 4).priced  # the TRES's
    # MaxMemPerNode still bounds it.
    capped = replace(shapes["batch"], max_mem_per_node_mb=100000.0)
    assert capped.mem_per_node_mb == 100000 and shapes["batch"].mem_per_node_mb == 120000


def test_maxmempercpu_raises_the_cpus_billed_or_the_option_does_not_fit() -> None:
    # MaxMemPerCPU=2000: slurmctld gives a job asking 8400 MB a node ceil(8400 / 2000) = 5 CPUs there
    # and bills them (_valid_pn_min_mem). The limit was not read: 1 CPU was billed.
    per_cpu = WHOLE_NODE.replace("State=UP", "State=UP MaxMemPerCPU=2000").replace(",Mem=1G", "")
    assert shapes_from_scontrol(per_cpu)["batch"].max_mem_per_cpu_mb == 2000
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=1)
    one = next(o for o in advice_in(per_cpu, job, [record(1, 60, peak_mb=7000)] * 2).options if o.size == 1)
    assert one.mem_per_node_mb == 8400 and one.allocation.cpus == 5
    assert one.quote is not None and one.quote.billed_units == pytest.approx(5.0)
    assert one.note == "Slurm gives it 5 CPUs for 8400 MB a node (MaxMemPerCPU=2000)"
    # 84000 MB a node would take 42 CPUs of a node of 32: not priced.
    big = next(o for o in advice_in(per_cpu, job, [record(1, 60, peak_mb=70000)] * 2).options if o.size == 1)
    assert not big.priced
    assert big.note == "needs 84000 MB per node: 42 CPUs a node at MaxMemPerCPU=2000; a node has 32"
    # Within it, nothing changes.
    fits = next(o for o in advice_in(per_cpu, job, [record(1, 60, peak_mb=1000)] * 2).options if o.size == 1)
    assert fits.allocation.cpus == 1 and fits.note == ""


@pytest.mark.parametrize(("price", "weights"), [(1.0, "CPU=1e308"), (0.0, "CPU=1.0,Mem=1e308")])
def test_a_cost_too_large_to_be_a_number_is_not_priced_and_the_others_are_answered(
    price: float, weights: str
) -> None:
    """Slurm's own TRESBillingWeights need only be finite (harp.toml's are bounded): 1e308 made costs
    inf, and with a price of 0 NaN, which the Pareto set's grouping failed on (IndexError: INTERNAL)."""
    common = "State=UP MaxTime=1-00:00:00 TotalCPUs=128 TotalNodes=4 TRES=cpu=128,mem=512000M,node=4"
    scontrol = f"PartitionName=batch {common}\nPartitionName=huge {common} TRESBillingWeights={weights}\n"
    runs = [record(1, 60, mem_per_node_mb=4000), record(4, 20, mem_per_node_mb=4000)]
    tariff = Tariff.of(Prices(price=price), from_scontrol(scontrol))
    advice = advise(
        Ask(JobRequest(user_name="ann", job_name="sim")), runs, tariff, shapes_from_scontrol(scontrol)
    )
    huge = [o for o in advice.options if o.partition == "huge" and o.note]
    assert huge and all(not o.priced and o.note.startswith("cost too large to be a number") for o in huge)
    assert (
        "partition huge: some options not priced: cost too large to be a number "
        "(the site's billing weights or price)" in advice.notes
    )
    if price > 0:
        assert advice.cheapest is not None and advice.cheapest.partition == "batch"
        assert {o.partition for o in advice.pareto} == {"batch"}


TWO_LIMITS = (
    "PartitionName=short MaxTime=01:00:00 State=UP TotalCPUs=32 TotalNodes=1 TRES=cpu=32,node=1\n"
    "PartitionName=long MaxTime=1-00:00:00 State=UP TotalCPUs=32 TotalNodes=1 TRES=cpu=32,node=1\n"
)


def test_no_limit_is_proposed_below_the_job_s_time_min() -> None:
    """slurmctld 22.05 refuses a job whose --time-min is above its time limit or its partition's
    MaxTime (ESLURM_INVALID_TIME_MIN_LIMIT). Before, a job of --time-min=90 whose runs took 20-30
    minutes was proposed a first limit of 33 minutes, and `short` (MaxTime 60) was priced for it."""
    runs = [record(4, minutes) for minutes in (20, 25, 30)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4, time_min_minutes=90)
    options = [o for o in advice_in(TWO_LIMITS, job, runs).options if o.size == 4]
    by_partition = {o.partition: o for o in options}
    assert by_partition["long"].limit_minutes == 90
    short = by_partition["short"]
    assert (
        not short.priced
        and short.note == "--time-min=90 is above the 60 minutes a job may have here: Slurm refuses it"
    )
    free = advice_in(TWO_LIMITS, replace(job, time_min_minutes=None), runs)
    assert {o.partition: o.limit_minutes for o in free.options if o.size == 4} == {"short": 33, "long": 33}
