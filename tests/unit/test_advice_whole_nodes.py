"""A partition that gives every job whole nodes (``OverSubscribe=EXCLUSIVE``; ``Exclusive=NODE`` from
Slurm 26.05) is priced as slurmctld allocates and bills there: all the CPUs and GPUs of the job's
nodes (``_resolve_shared_status`` sets the job's ``whole_node``), its memory as asked.

The partitions are faked at one boundary, the text ``scontrol show partition`` prints."""

from __future__ import annotations

import pytest

from slurm_harp.advice.partition_shape import shapes_from_scontrol
from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.site_partitions import SitePartitions
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from tests.unit.test_advice_pricing import record

# Ten nodes of 32 CPUs and 256000 MB each: one shared, one of whole nodes
NODES = "State=UP MaxTime=1-00:00:00 TotalNodes=10 TotalCPUs=320 TRES=cpu=320,mem=2560000M,node=10"
SHARED_AND_WHOLE = (
    f"PartitionName=shared OverSubscribe=NO {NODES}\nPartitionName=whole OverSubscribe=EXCLUSIVE {NODES}\n"
)
# Two nodes of 64 CPUs and 8 GPUs, a GPU billed as 8 CPUs
GPU_NODES = (
    "PartitionName=gpu OverSubscribe=EXCLUSIVE State=UP MaxTime=1-00:00:00 TotalNodes=2 TotalCPUs=128 "
    "TRES=cpu=128,mem=1024000M,node=2,gres/gpu=16 TRESBillingWeights=CPU=1.0,GRES/gpu=8.0\n"
)


def advice_in(scontrol: str, job: JobRequest, runs: list[JobRecord], prices: Prices | None = None) -> Advice:
    site = SitePartitions.read(scontrol)
    return advise(Ask(job), runs, Tariff.of(prices or Prices(), site.table), site.shapes)


def whole_nodes_note(partition: str, held: str) -> str:
    whole = "a job holds whole nodes (OverSubscribe=EXCLUSIVE)"
    return f"partition {partition}: {whole}: priced with all their {held}"


def test_a_partition_of_whole_nodes_bills_every_cpu_of_them_and_is_not_named_the_cheapest() -> None:
    """4 CPUs in `whole` at 0.08 a unit-hour against `shared` at 0.1: Slurm gives and bills the job
    the node's 32 CPUs there, 2.56 an hour against 0.4. OverSubscribe was not read: `whole` was
    priced on 4 CPUs, 0.32 an hour, and named the cheapest."""
    prices = Prices(price=0.1, partitions=(PartitionPrice("whole", price=0.08),))
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4)
    advice = advice_in(
        SHARED_AND_WHOLE, job, [record(4, 80, peak_mb=2000), record(4, 85, peak_mb=2000)], prices
    )
    at_4 = {o.partition: o for o in advice.options if o.size == 4}
    whole, shared = at_4["whole"].quote, at_4["shared"].quote
    assert whole is not None and shared is not None
    assert whole.billed_units == 32.0 and whole.rate == pytest.approx(2.56)
    assert shared.billed_units == 4.0 and shared.rate == pytest.approx(0.4)
    assert at_4["whole"].allocation.cpus == 32 and at_4["whole"].allocation.nodes == 1
    assert advice.cheapest is not None and advice.cheapest.partition == "shared"
    assert whole_nodes_note("whole", "CPUs") in advice.notes
    assert not any("partition shared: a job holds" in n for n in advice.notes)


def test_whole_nodes_hold_their_gpus_and_memory_per_cpu_but_only_the_memory_asked() -> None:
    """A GPU job there holds every GPU and CPU of its nodes (gres_stepmgr_job_alloc_whole_node):
    2 GPUs beside 8 CPUs bill 64 + 8 x 8 = 128 units, not 8 + 2 x 8 = 24. Memory per node is what
    the job asks (sbatch(1): "only allocated as much memory as it requested"); per CPU, a CPU held."""
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=8, gpus_per_node=2)
    advice = advice_in(
        GPU_NODES, job, [record(8, 60, gpus=2, peak_mb=2000), record(8, 62, gpus=2, peak_mb=2000)]
    )
    two = next(o for o in advice.options if o.size == 2)
    assert (two.allocation.cpus, two.allocation.gpus, two.allocation.nodes) == (64, 8, 1)
    assert two.quote is not None and two.quote.billed_units == 64 + 8 * 8
    assert two.mem_per_node_mb == 2400  # the runs' peak plus 20 %, not the node's 512000 MB
    assert whole_nodes_note("gpu", "CPUs and GPUs") in advice.notes
    per_cpu = JobRequest(user_name="ann", job_name="sim", min_cpus=4, mem_per_cpu_mb=1000)
    runs = [record(4, 80, mem_per_cpu_mb=1000), record(4, 85, mem_per_cpu_mb=1000)]
    at_4 = {o.partition: o for o in advice_in(SHARED_AND_WHOLE, per_cpu, runs).options if o.size == 4}
    assert at_4["shared"].mem_per_node_mb == 4 * 1000
    assert at_4["whole"].mem_per_node_mb == 32 * 1000  # 32 CPUs held at 1000 MB a CPU


@pytest.mark.parametrize(
    ("fields", "exclusive"),
    [
        ("OverSubscribe=EXCLUSIVE", "OverSubscribe=EXCLUSIVE"),
        ("OverSubscribe=exclusive", "OverSubscribe=EXCLUSIVE"),
        ("OverSubscribe=NO Exclusive=NODE", "Exclusive=NODE"),  # Slurm 26.05 prints both
        ("OverSubscribe=NO Exclusive=TOPO", "Exclusive=TOPO"),
        ("OverSubscribe=NO Exclusive=USER", ""),  # nodes to one user's jobs, each as asked
        ("OverSubscribe=NO", ""),
        ("OverSubscribe=YES:4", ""),
        ("OverSubscribe=FORCE:4", ""),
        ("", ""),
    ],
)
def test_the_fields_that_give_jobs_whole_nodes_are_read(fields: str, exclusive: str) -> None:
    assert shapes_from_scontrol(f"PartitionName=p {fields} {NODES}")["p"].exclusive == exclusive


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("OverSubscribe=MAYBE", "OverSubscribe: 'MAYBE': not EXCLUSIVE, NO, YES:<n> or FORCE:<n>"),
        ("Exclusive=SOMETIMES", "Exclusive: 'SOMETIMES': not NO, NODE, USER or TOPO"),
    ],
)
def test_a_value_slurm_does_not_print_costs_that_partition_alone(field: str, said: str) -> None:
    """Read as shared, a partition of whole nodes would be priced at a fraction of its billing: it is
    not read, the field named, the others priced."""
    site = SitePartitions.read(f"PartitionName=odd {field} {NODES}\nPartitionName=shared {NODES}\n")
    assert set(site.shapes) == {"shared"} and site.unread["odd"].why == said


def own_exclusive_in(scontrol: str, job: JobRequest, runs: list[JobRecord], exclusive: bool) -> Advice:
    site = SitePartitions.read(scontrol)
    return advise(Ask(job, exclusive=exclusive), runs, Tariff.of(Prices(), site.table), site.shapes)


def test_a_job_s_own_exclusive_holds_whole_nodes_in_a_partition_that_shares_them() -> None:
    """sbatch --exclusive sets the job's whole_node (job_mgr.c), and cons_tres then gives it every CPU
    of its nodes (_cpus_to_use), in a shared partition as in one of OverSubscribe=EXCLUSIVE, even
    OverSubscribe=FORCE: 4 CPUs bill the node's 32, and 40 CPUs two nodes' 64. Its memory per CPU
    counts every CPU held. Before, the request did not carry it: 4 units, as a job sharing nodes."""
    force = f"PartitionName=force OverSubscribe=FORCE:4 {NODES}\n"
    runs = [record(4, 80, mem_per_cpu_mb=1000), record(4, 85, mem_per_cpu_mb=1000)]
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4, mem_per_cpu_mb=1000)
    own = own_exclusive_in(SHARED_AND_WHOLE + force, job, runs, exclusive=True)
    at_4 = {o.partition: o for o in own.options if o.size == 4}
    for name in ("shared", "force", "whole"):
        quote = at_4[name].quote
        assert quote is not None and quote.billed_units == 32.0, name
        assert at_4[name].allocation.cpus == 32 and at_4[name].mem_per_node_mb == 32 * 1000, name
    wide = JobRequest(user_name="ann", job_name="sim", min_cpus=40)
    wide_own = own_exclusive_in(SHARED_AND_WHOLE, wide, [record(40, 10), record(40, 11)], exclusive=True)
    forty = next(o for o in wide_own.options if o.partition == "shared" and o.size == 40)
    assert (forty.allocation.cpus, forty.allocation.nodes) == (64, 2)
    assert "your --exclusive: a job holds whole nodes: priced with all their CPUs" in own.notes
    assert whole_nodes_note("whole", "CPUs") in own.notes  # the partition's own, as before
    assert not any("partition shared: a job holds" in n for n in own.notes)

    shared = own_exclusive_in(SHARED_AND_WHOLE + force, job, runs, exclusive=False)  # as before
    at_4 = {o.partition: o for o in shared.options if o.size == 4}
    assert at_4["shared"].allocation.cpus == at_4["force"].allocation.cpus == 4
    assert at_4["shared"].quote is not None and at_4["shared"].quote.billed_units == 4.0
    assert not any("your --exclusive" in n for n in shared.notes)


def test_a_gpu_job_s_own_exclusive_holds_every_gpu_and_cpu_of_its_nodes() -> None:
    """2 GPUs beside 8 CPUs in a shared partition of nodes of 64 CPUs and 8 GPUs: with --exclusive
    64 + 8 x 8 = 128 units, not 8 + 2 x 8 = 24."""
    shared_gpus = GPU_NODES.replace("OverSubscribe=EXCLUSIVE", "OverSubscribe=NO")
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=8, gpus_per_node=2)
    runs = [record(8, 60, gpus=2, peak_mb=2000), record(8, 62, gpus=2, peak_mb=2000)]
    own = own_exclusive_in(shared_gpus, job, runs, exclusive=True)
    two = next(o for o in own.options if o.size == 2)
    assert (two.allocation.cpus, two.allocation.gpus, two.allocation.nodes) == (64, 8, 1)
    assert two.quote is not None and two.quote.billed_units == 64 + 8 * 8
    assert two.mem_per_node_mb == 2400  # only the memory asked
    assert "your --exclusive: a job holds whole nodes: priced with all their CPUs and GPUs" in own.notes
    alone = next(o for o in own_exclusive_in(shared_gpus, job, runs, exclusive=False).options if o.size == 2)
    assert alone.quote is not None and alone.quote.billed_units == 8 + 2 * 8


def test_an_exclusive_job_in_a_partition_of_unknown_size_says_its_nodes_are_not_priced() -> None:
    """scontrol unread: a node's CPUs are unknown, so the whole nodes cannot be priced; a note says
    so, as for --mem=0, rather than the CPUs asked passing silently for the bill."""
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4)
    ask = Ask(job, partitions=("batch",), exclusive=True)
    advice = advise(ask, [record(4, 80), record(4, 85)], Tariff.of(Prices()), {})
    assert "partition batch: a node's CPUs are unknown, so --exclusive is not priced" in advice.notes
