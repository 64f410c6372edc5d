"""advice.partition_shape: what a partition's nodes give a job, as slurmctld gives and bills it.

The partitions are faked at one boundary, the text ``scontrol show partition`` prints; the figures
are those a real 22.05 slurmctld printed and billed (tests/e2e/test_advise_node_size_e2e.py)."""

from __future__ import annotations

from slurm_harp.advice.partition_shape import shapes_from_scontrol
from slurm_harp.core.request import JobRequest
from tests.unit.test_advice_pricing import record
from tests.unit.test_advice_whole_nodes import advice_in

# Two nodes of 4 CPUs, one core of each kept for the system (CoreSpecCount=1): TotalCPUs counts it,
# the TRES does not.
SPEC = "State=UP MaxTime=1-00:00:00 TotalCPUs=8 TotalNodes=2 TRES=cpu=6,mem=45800M,node=2,billing=6"
SHARED_AND_WHOLE = (
    f"PartitionName=batch OverSubscribe=NO {SPEC}\nPartitionName=whole OverSubscribe=EXCLUSIVE {SPEC}\n"
)


def test_cores_kept_for_the_system_are_not_a_job_s() -> None:
    """slurmctld gives a job 3 CPUs of such a node: it refuses -c 4 and -n 8, and a job holding a
    node whole is given and billed 3 CPUs. Read from TotalCPUs, the advice priced -c 4 (a job
    that never runs) and billed a whole node 4 CPUs."""
    shapes = shapes_from_scontrol(SHARED_AND_WHOLE)
    assert shapes["batch"].cpus_per_node == 3 and shapes["batch"].most_cpus == 6
    assert shapes["whole"].node_cpus == 3
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=1)
    runs = [record(1, 60, peak_mb=100), record(4, 20, peak_mb=100)]
    options = advice_in(SHARED_AND_WHOLE, job, runs).options
    whole = next(o for o in options if o.partition == "whole" and o.size == 1)
    assert whole.allocation.cpus == 3 and whole.quote is not None and whole.quote.billed_units == 3
    # 4 CPUs take two nodes of 3 (-n 4 runs; on one node it would not)
    assert next(o for o in options if o.partition == "batch" and o.size == 4).allocation.nodes == 2
    four = JobRequest(user_name="ann", job_name="sim", min_cpus=4, num_tasks=1, cpus_per_task=4)
    one_task = next(
        o for o in advice_in(SHARED_AND_WHOLE, four, runs).options if o.partition == "batch" and o.size == 4
    )
    assert not one_task.priced and one_task.note == "one task's CPUs must fit one node: a node has 3 here"


def test_without_a_tres_cpu_the_total_is_read() -> None:
    shapes = shapes_from_scontrol("PartitionName=old TotalCPUs=8 TotalNodes=2 TRES=mem=1000M,node=2\n")
    assert shapes["old"].cpus == 8 and shapes["old"].cpus_per_node == 4
