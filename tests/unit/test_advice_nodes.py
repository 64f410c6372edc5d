"""The option standing for what a job asks is priced on the nodes it asks (`-N`), shape known or not."""

from __future__ import annotations

from slurm_harp.advice.billing import parse_weights
from slurm_harp.advice.evidence import Evidence, Run, request_size
from slurm_harp.advice.option import Pricing
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.quote import Allocation
from slurm_harp.advice.script import parse_script
from slurm_harp.advice.sizing import Memory, Scaling
from slurm_harp.advice.tariff import PartitionTariff, Tariff


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
    held = Allocation.of_request(job)
    for option in (pricing.option("batch", shape, size), pricing.option("batch", None, size)):
        assert (option.allocation.nodes, option.allocation.mem_mb) == (held.nodes, held.mem_mb) == (4, 64000)
        assert option.quote is not None
        assert option.quote.billed_units == tariff.billed("batch", held.tres())
    assert pricing.option("batch", shape, 8).allocation.nodes == 1  # other sizes: the fewest nodes
