"""The option standing for what a job asks is priced on the nodes it asks (`-N`), shape known or not, and
every option on nodes the partition lets a job have (MaxNodes, MinNodes)."""

from __future__ import annotations

from slurm_harp.advice.billing import parse_weights
from slurm_harp.advice.evidence import Evidence, Run, request_size
from slurm_harp.advice.option import Pricing
from slurm_harp.advice.partition_shape import PartitionShape, shapes_from_scontrol
from slurm_harp.advice.quote import Allocation
from slurm_harp.advice.script import parse_script
from slurm_harp.advice.sizing import Memory, Scaling
from slurm_harp.advice.tariff import PartitionTariff, Tariff
from slurm_harp.core.request import JobRequest


def test_the_asked_size_is_priced_on_the_nodes_the_job_asks() -> None:
    """`-N 4 --mem=16000` (4 tasks, 4 CPUs): with the partition's shape known the asked option was
    placed on the fewest nodes 4 CPUs fit (1), with one node's memory, and billed a quarter of what
    Slurm holds (4 nodes, 64 GB) under a tariff that bills memory: a cheaper option went unnamed."""
    job = parse_script("#!/bin/sh\n#SBATCH -J sim -p batch -N 4 --mem=16000 -t 60\nsrun ./a.out\n").request
    runs = Evidence(runs=tuple(Run(4, m, nodes=4, requested_mb=16000) for m in (30, 32, 35)))
    tariff = Tariff(
        partitions={
            "batch": PartitionTariff(weights=parse_weights("CPU=1.0,Mem=0.25G"), price=1.0, max_minutes=1440)
        }
    )
    pricing = Pricing(job, False, 0, runs, Scaling.fit(runs.runs), tariff, Memory.of(runs, job, 0.0))
    shape = PartitionShape("batch", nodes=8, cpus=256, mem_mb=8 * 256000)
    size = request_size(job, False)
    assert size == 4
    held = Allocation(cpus=4, mem_mb=64000.0, nodes=4)  # what Slurm holds for the job: 4 x 16000 MB
    for option in (pricing.option("batch", shape, size), pricing.option("batch", None, size)):
        assert (option.allocation.nodes, option.allocation.mem_mb) == (held.nodes, held.mem_mb) == (4, 64000)
        assert option.quote is not None
        assert option.quote.billed_units == tariff.billed("batch", held.tres())
    assert pricing.option("batch", shape, 8).allocation.nodes == 1  # other sizes: the fewest nodes


def _priced_on(scontrol: str, job: JobRequest, runs: Evidence) -> dict[tuple[str, int], tuple[int, str]]:
    """(partition, size) -> (nodes, "") where priced, (0, note) where not."""
    shapes = shapes_from_scontrol(scontrol)
    pricing = Pricing(job, False, 0, runs, Scaling.fit(runs.runs), Tariff(), Memory.of(runs, job, 0.0))
    out = {}
    for name, shape in shapes.items():
        for size in (1, 2, 4, 8):
            o = pricing.option(name, shape, size)
            out[name, size] = (o.allocation.nodes, "") if o.priced else (0, o.note)
    return out


def test_the_asked_nodes_past_what_a_job_may_have_are_not_priced() -> None:
    """`-N 4` in a partition of 2 nodes, or of 8 with MaxNodes=2: it was priced on 4 nodes there and
    could be named the cheapest, where Slurm refuses the job or holds it for good."""
    job = JobRequest(user_name="ann", job_name="sim", num_tasks=4, min_cpus=4, min_nodes=4)
    runs = Evidence(runs=tuple(Run(s, 60 / s, nodes=4 if s == 4 else 1) for s in (1, 2, 4, 8)))
    scontrol = (
        "PartitionName=two State=UP TotalNodes=2 TotalCPUs=64 TRES=cpu=64,node=2\n"
        "PartitionName=capped State=UP TotalNodes=8 TotalCPUs=256 MaxNodes=2 TRES=cpu=256,node=8\n"
        "PartitionName=wide State=UP TotalNodes=8 TotalCPUs=256 TRES=cpu=256,node=8\n"
    )
    priced = _priced_on(scontrol, job, runs)
    assert priced["two", 4] == priced["capped", 4] == (0, "asks 4 nodes; a job may have 2 here")
    assert priced["wide", 4] == (4, "") and priced["two", 8] == priced["capped", 8] == (1, "")
    pricing = Pricing(job, False, 0, runs, Scaling.fit(runs.runs), Tariff(), Memory.of(runs, job, 0.0))
    assert pricing.option("unknown", None, 4).allocation.nodes == 4  # no shape: as asked


def test_a_partitions_min_nodes_is_what_a_job_without_n_is_given() -> None:
    """MinNodes=4: slurmctld gives a job without `-N` 4 nodes, and holds one asking fewer (`-N 2`,
    which sbatch makes its most too). Such a partition was priced on 1 node, cheapest of all."""
    runs = Evidence(runs=tuple(Run(s, 60 / s) for s in (1, 2, 4, 8)))
    scontrol = "PartitionName=wide State=UP TotalNodes=8 TotalCPUs=256 MinNodes=4 TRES=cpu=256,node=8\n"
    assert shapes_from_scontrol(scontrol)["wide"].min_nodes == 4
    free = _priced_on(scontrol, JobRequest(user_name="ann", job_name="sim", min_cpus=4), runs)
    assert free["wide", 4] == (4, "") and free["wide", 8] == (4, "")
    assert free["wide", 2] == (0, "a job here has at least 4 nodes (MinNodes), each with a CPU")
    two = JobRequest(user_name="ann", job_name="sim", num_tasks=4, min_cpus=4, min_nodes=2)
    assert _priced_on(scontrol, two, runs)["wide", 4] == (
        0,
        "asks 2 nodes; a job here has at least 4 (MinNodes)",
    )


# Eight nodes of 32 CPUs (small), two of 64 (big)
SMALL_AND_BIG = (
    "PartitionName=small State=UP TotalNodes=8 TotalCPUs=256 MaxTime=2-00:00:00 TRES=cpu=256,node=8\n"
    "PartitionName=big State=UP TotalNodes=2 TotalCPUs=128 MaxTime=2-00:00:00 TRES=cpu=128,node=2\n"
)


def test_one_tasks_cpus_must_fit_one_node() -> None:
    """`-c 48`, one multi-threaded task: sbatch refuses it on nodes of 32 CPUs. It was priced there on
    2 nodes, and with `small` at half price named the fastest; now only `big` holds it. `-n 48`
    (tasks of one CPU) still spreads over the nodes."""
    runs = Evidence(runs=tuple(Run(s, m) for s, m in ((8, 100), (8, 104), (48, 20), (48, 21))))
    shapes = shapes_from_scontrol(SMALL_AND_BIG)
    one_task = (
        JobRequest(user_name="ann", job_name="omp", min_cpus=48, cpus_per_task=48, num_tasks=1),
        parse_script("#!/bin/sh\n#SBATCH -J omp -c 48\n./omp\n").request,  # no -n: one task
    )
    for job in one_task:
        pricing = Pricing(job, False, 0, runs, Scaling.fit(runs.runs), Tariff(), Memory.of(runs, job, 0.0))
        small, big = pricing.option("small", shapes["small"], 48), pricing.option("big", shapes["big"], 48)
        assert not small.priced and small.note == "one task's CPUs must fit one node: a node has 32 here"
        assert big.priced and big.allocation.nodes == 1
        assert pricing.option("small", shapes["small"], 32).allocation.nodes == 1
    tasks = JobRequest(user_name="ann", job_name="omp", min_cpus=48, num_tasks=48)
    pricing = Pricing(tasks, False, 0, runs, Scaling.fit(runs.runs), Tariff(), Memory.of(runs, tasks, 0.0))
    assert pricing.option("small", shapes["small"], 48).allocation.nodes == 2


def test_tasks_of_several_cpus_are_placed_whole_on_the_nodes() -> None:
    """`-n 3 -c 20`: one task of 20 CPUs a node of 32, so 3 nodes (the 60 CPUs spread freely fit 2);
    `-n 2 -c 40` fits no node of 32."""
    runs = Evidence(runs=tuple(Run(60, m, nodes=3) for m in (30, 32)))
    shapes = shapes_from_scontrol(SMALL_AND_BIG)
    job = JobRequest(user_name="ann", job_name="mix", min_cpus=60, cpus_per_task=20, num_tasks=3)
    pricing = Pricing(job, False, 0, runs, Scaling.fit(runs.runs), Tariff(), Memory.of(runs, job, 0.0))
    assert pricing.option("small", shapes["small"], 60).allocation.nodes == 3
    assert pricing.option("big", shapes["big"], 60).allocation.nodes == 1
    wide = JobRequest(user_name="ann", job_name="mix", min_cpus=80, cpus_per_task=40, num_tasks=2)
    pricing = Pricing(wide, False, 0, runs, Scaling.fit(runs.runs), Tariff(), Memory.of(runs, wide, 0.0))
    assert (
        pricing.option("small", shapes["small"], 80).note
        == "one task's CPUs must fit one node: a node has 32 here"
    )
    assert pricing.option("big", shapes["big"], 80).allocation.nodes == 2
