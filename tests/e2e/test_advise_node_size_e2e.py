"""How big `harp advise` takes a node to be is what slurmctld gives a job of it, on a real cluster
whose nodes keep some for the system (two nodes of 4 CPUs, MemSpecLimit=1000, CoreSpecCount=1):
- memory: RealMemory less MemSpecLimit (`scontrol show node`), not the partition's TRES, which
  counts RealMemory whole. A `--mem=0` job is allocated 1000 MB less than the TRES's node, `sbatch
  --test-only` refuses a MB more than that, and the advice prices `--mem=0` at it and leaves a
  request of a MB more unpriced, naming the node's memory;
- CPUs: the TRES's cpu, not TotalCPUs, which counts the kept core. A job holding a node whole is
  given and billed 3 CPUs, sbatch refuses `-c 4`, and the advice prices and leaves them so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.advice_site import advising, open_site, scripts
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import settled
from tests.e2e.test_advise_whole_nodes_e2e import WHOLE, alloc_tres

NAME = "advise-node-size"
TEST_ONLY = ("sbatch", "--test-only", "-p", "batch", "-t", "5", "--wrap", "true")


@pytest.fixture
def site(start_cluster: StartCluster) -> Iterator[tuple[SlurmCluster, Path]]:
    yield from open_site(
        start_cluster, nodes=2, node_extra="MemSpecLimit=1000 CoreSpecCount=1", slurm_conf_extra=WHOLE
    )


def tres_mem_per_node(cluster: SlurmCluster) -> int:
    shown = cluster.run(["scontrol", "--oneliner", "show", "partition", "batch"]).stdout
    tres = dict(item.split("=", 1) for item in shown.split("TRES=", 1)[1].split()[0].split(","))
    return int(tres["mem"].removesuffix("M")) // int(tres["node"])


def size_1(answer: dict[str, Any], partition: str = "batch") -> dict[str, Any]:
    return next(o for o in answer["options"] if o["partition"] == partition and int(o.get("size", 0)) == 1)


def test_a_node_is_as_big_as_slurmctld_gives_a_job(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    whole_mem = cluster.sbatch(["-J", NAME, "-n", "1", "--mem=0", "-t", "5"], "#!/bin/sh\nsleep 6\n")
    whole_cpus = cluster.sbatch(["-J", NAME, "-p", "whole", "-n", "1", "-t", "5"], "#!/bin/sh\nsleep 6\n")
    assert whole_mem.job_id is not None and whole_cpus.job_id is not None
    assert settled(cluster, whole_mem.job_id)[0]["State"] == "COMPLETED"
    assert settled(cluster, whole_cpus.job_id)[0]["State"] == "COMPLETED"
    given = int(alloc_tres(cluster, whole_mem.job_id)["mem"].removesuffix("M"))
    assert given == tres_mem_per_node(cluster) - 1000  # MemSpecLimit's, kept from the job
    assert cluster.run([*TEST_ONLY, f"--mem={given}"]).returncode == 0
    refused = cluster.run([*TEST_ONLY, f"--mem={given + 1}"])
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr
    held = alloc_tres(cluster, whole_cpus.job_id)
    assert held["cpu"] == held["billing"] == "3"  # of 4: the core CoreSpecCount keeps is no job's
    assert cluster.run([*TEST_ONLY, "-c", "3"]).returncode == 0
    assert cluster.run([*TEST_ONLY, "-c", "4"]).returncode != 0

    # Job names without runs: the memory is the job's own ask, a node's for --mem=0.
    written = scripts(
        work,
        "fresh",
        {
            "mem-0": "-p batch -n 1 --mem=0",
            "mem-fits": f"-p batch -n 1 --mem={given}",
            "mem-over": f"-p batch -n 1 --mem={given + 1}",
            "whole": "-p whole -n 1",
            "one-task": "-p batch -c 4",
        },
    )
    with advising(cluster, work) as advise:
        answers = {name: advise("--script", str(path)) for name, path in written.items()}
        ran = advise("--name", NAME, "--partition", "whole", "--cpus", "1")
    assert int(size_1(answers["mem-0"])["mem_per_node_mb"]) == given  # was the TRES's, 1000 MB more
    fits = size_1(answers["mem-fits"])
    assert int(fits["mem_per_node_mb"]) == given and "MB per node" not in fits.get("note", "")
    over = size_1(answers["mem-over"])
    assert not over.get("priced", False)
    assert over["note"] == f"needs {given + 1} MB per node; a node has {given} MB"

    assert int(size_1(answers["whole"], "whole")["cpus"]) == 3  # was 4
    assert size_1(ran, "whole")["rate"] == pytest.approx(float(held["billing"]))  # a unit an hour each
    four = next(o for o in answers["one-task"]["options"] if int(o.get("size", 0)) == 4)
    assert (
        not four.get("priced", False)
        and four["note"] == "one task's CPUs must fit one node: a node has 3 here"
    )
