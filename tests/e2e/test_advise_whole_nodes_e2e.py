"""What the advice takes from Slurm about whole nodes and tasks, checked on a real cluster (two nodes
of 4 CPUs): a 1-CPU job in an `OverSubscribe=EXCLUSIVE` partition, or of its own `sbatch --exclusive`
in the shared `batch`, is allocated and billed the node's 4 CPUs in accounting, and `harp advise`
prices each so, with its note; sbatch takes 8 tasks over the two nodes but refuses one task of 8 CPUs
(`-c 8`), as the advice leaves such a size unpriced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.advice_site import advising, open_site, submit_two_sizes
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import settled

NAME = "advise-whole"
SLEEP_6 = "#!/bin/sh\nsleep 6\n"
WHOLE = "PartitionName=whole Nodes=ALL MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE\n"


@pytest.fixture
def site(start_cluster: StartCluster) -> Iterator[tuple[SlurmCluster, Path]]:
    yield from open_site(start_cluster, nodes=2, slurm_conf_extra=WHOLE)


def alloc_tres(cluster: SlurmCluster, job_id: int) -> dict[str, str]:
    (row,) = cluster.sacct_rows([job_id], ["AllocTRES"], allocations_only=True)
    return dict(item.split("=", 1) for item in row["AllocTRES"].split(",") if "=" in item)


def test_a_partition_of_whole_nodes_is_priced_as_accounting_bills_it(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    one, two = submit_two_sizes(cluster, NAME)  # in batch: 1 CPU for 20 s, 2 CPUs for 6 s
    # 6 s, as the 2-CPU run: a batch step of 1 s may end before accounting samples its memory, and
    # settled() waits for that sample.
    whole = cluster.sbatch(["-J", "one-cpu", "-p", "whole", "-n", "1", "-t", "5"], SLEEP_6)
    assert whole.job_id is not None, whole.stderr
    # The job's own --exclusive in the shared partition (another name: not evidence for NAME)
    own = cluster.sbatch(["-J", "own-whole", "-p", "batch", "-n", "1", "--exclusive", "-t", "5"], SLEEP_6)
    assert own.job_id is not None, own.stderr
    for job in (one, two, whole.job_id, own.job_id):
        assert settled(cluster, job)[0]["State"] == "COMPLETED"
    held = alloc_tres(cluster, whole.job_id)
    assert held["cpu"] == "4" and held["billing"] == "4", held  # the whole node, for 1 CPU asked
    own_held = alloc_tres(cluster, own.job_id)
    assert own_held["cpu"] == "4" and own_held["billing"] == "4", own_held  # in batch too

    # One task of 8 CPUs fits no node of 4: sbatch refuses it; 8 tasks of one CPU fit the two nodes.
    test_only = ["sbatch", "--test-only", "-p", "batch", "-t", "5", "--wrap", "true"]
    assert cluster.run([*test_only, "-n", "8"]).returncode == 0
    refused = cluster.run([*test_only, "-c", "8"])
    assert refused.returncode != 0, refused.stdout

    script = work / "one-task.sbatch"
    script.write_text(f"#!/bin/sh\n#SBATCH -J {NAME} -p batch -c 8\ntrue\n")
    exclusive = work / "exclusive.sbatch"
    exclusive.write_text(f"#!/bin/sh\n#SBATCH -J {NAME} --exclusive -p batch -n 1\ntrue\n")
    with advising(cluster, work) as advise:
        answer = advise("--name", NAME)
        one_task = advise("--script", str(script), "--partition", "batch")
        own_whole = advise("--script", str(exclusive), "--partition", "batch")
    options = answer["options"]
    at_1 = {o["partition"]: o for o in options if int(o.get("size", 0)) == 1}
    assert int(at_1["whole"]["cpus"]) == int(held["cpu"]) and int(at_1["batch"]["cpus"]) == 1
    assert at_1["whole"]["rate"] == pytest.approx(float(held["billing"]))  # 1 billed unit an hour each
    assert at_1["batch"]["rate"] == pytest.approx(1.0)
    assert options[answer["cheapest"]]["partition"] != "whole"
    note = "partition whole: a job holds whole nodes (OverSubscribe=EXCLUSIVE): priced with all their CPUs"
    assert note in answer["notes"]
    eight = next(o for o in one_task["options"] if int(o.get("size", 0)) == 8)
    assert not eight.get("priced", False)
    assert eight["note"] == "one task's CPUs must fit one node: a node has 4 here"
    # The script's --exclusive: size 1 in batch priced as accounting billed the --exclusive job
    own_1 = next(o for o in own_whole["options"] if int(o.get("size", 0)) == 1)
    assert own_1["partition"] == "batch" and int(own_1["cpus"]) == int(own_held["cpu"])
    assert own_1["rate"] == pytest.approx(float(own_held["billing"]))
    assert "your --exclusive: a job holds whole nodes: priced with all their CPUs" in own_whole["notes"]
