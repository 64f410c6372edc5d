"""The memory `harp advise` says a node holds is what slurmctld gives a job of it: RealMemory less
MemSpecLimit, not the partition's TRES (which counts RealMemory whole). On a real cluster with
MemSpecLimit=1000: a `--mem=0` job is allocated 1000 MB less than the TRES's node, `sbatch
--test-only` refuses a MB more than that, and the advice prices `--mem=0` at it and leaves a
request of a MB more unpriced, naming the node's memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.advice_site import advice_daemon, open_site
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import settled
from tests.e2e.test_advise_whole_nodes_e2e import alloc_tres, harp_advise

NAME = "advise-node-memory"


@pytest.fixture
def site(start_cluster: StartCluster) -> Iterator[tuple[SlurmCluster, Path]]:
    yield from open_site(start_cluster, nodes=2, node_extra="MemSpecLimit=1000")


def tres_mem_per_node(cluster: SlurmCluster) -> int:
    shown = cluster.run(["scontrol", "--oneliner", "show", "partition", "batch"]).stdout
    tres = dict(item.split("=", 1) for item in shown.split("TRES=", 1)[1].split()[0].split(","))
    return int(tres["mem"].removesuffix("M")) // int(tres["node"])


def test_a_node_s_memory_is_what_slurmctld_gives_a_job(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    whole = cluster.sbatch(["-J", NAME, "-n", "1", "--mem=0", "-t", "5"], "#!/bin/sh\nsleep 6\n")
    assert whole.job_id is not None, whole.stderr
    assert settled(cluster, whole.job_id)[0]["State"] == "COMPLETED"
    given = int(alloc_tres(cluster, whole.job_id)["mem"].removesuffix("M"))
    assert given == tres_mem_per_node(cluster) - 1000  # MemSpecLimit's, kept from the job
    test_only = ["sbatch", "--test-only", "-p", "batch", "-t", "5", "--wrap", "true"]
    assert cluster.run([*test_only, f"--mem={given}"]).returncode == 0
    refused = cluster.run([*test_only, f"--mem={given + 1}"])
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr

    # Job names without runs: the memory is the job's own ask, a node's for --mem=0.
    scripts = {}
    for mem in ("0", str(given), str(given + 1)):
        scripts[mem] = work / f"mem-{mem}.sbatch"
        scripts[mem].write_text(f"#!/bin/sh\n#SBATCH -J fresh-{mem} -p batch -n 1 --mem={mem}\ntrue\n")
    socket = ["--socket", str(work / "advice.sock")]
    daemon = advice_daemon(cluster, work)
    daemon.start()
    try:
        answers = {m: harp_advise(cluster, *socket, "--script", str(p)) for m, p in scripts.items()}
    finally:
        daemon.stop()
    one = {m: next(o for o in a["options"] if int(o.get("size", 0)) == 1) for m, a in answers.items()}
    assert int(one["0"]["mem_per_node_mb"]) == given  # was the TRES's, 1000 MB more
    assert int(one[str(given)]["mem_per_node_mb"]) == given and "MB per node" not in one[str(given)].get(
        "note", ""
    )
    over = one[str(given + 1)]
    assert not over.get("priced", False)
    assert over["note"] == f"needs {given + 1} MB per node; a node has {given} MB"
