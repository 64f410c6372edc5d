"""Jobs that name no number of MB on a real slurmctld: the memory the daemon serves them with (the
defaults and node memory `scontrol` shows, core.memory_default) is the memory training reads from
their accounting (ReqMem, filled in by slurmctld after job_submit.lua), in a partition without a
default of its own (slurm.conf's DefMemPerCPU=512), one with its own per CPU, one with its own per
node, for --mem=0 and --mem-per-cpu=0 (all of a node's), and on a site with no default at all; and
so are its CPUs, nodes and GPUs, for the ways of asking them that accounting could read otherwise
(ReqCPUS, ReqNodes: --ntasks-per-node, -N 1-2, --exclusive, --mincpus).

A job_submit.lua runs the plugin's own request builder (harp.request) on the job_desc slurmctld
gives it and writes what the daemon would receive into the job's comment, which accounting keeps.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from slurm_harp.core.features import FEATURE_NAMES, vectorize
from slurm_harp.core.memory_default import MemoryDefaults
from slurm_harp.core.request import JobRequest
from slurm_harp.server.convert import request_from_proto, request_to_proto
from slurm_harp.server.slurm_memory_defaults import SlurmMemoryDefaults
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import accounted
from tests.e2e.test_gpus_e2e import FAKE_GPUS

RECORDER = f"""
package.path = "{REPO / "plugin"}/?.lua;" .. package.path
local request = require "harp.request"
function slurm_job_submit(job_desc, part_list, submit_uid)
  local r = request.build(job_desc, submit_uid, part_list)
  local fields = {{}}
  for _, k in ipairs({{"partition", "min_cpus", "min_nodes", "num_tasks", "cpus_per_task",
                      "mem_per_node_mb", "mem_per_cpu_mb", "gpus_per_node"}}) do
    fields[#fields + 1] = k .. "=" .. tostring(r[k])
  end
  job_desc.comment = table.concat(fields, " ")
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""
ASKS = [
    [],
    ["-c", "2"],
    ["-n", "2"],
    ["-p", "percpu", "-c", "2"],
    ["-p", "pernode", "-c", "2"],
    ["-p", "percpu", "-n", "3"],
    ["--mem=100"],  # its own: kept
    ["--mem-per-cpu=100", "-c", "2"],
    ["--mem-per-cpu=100", "--exclusive"],  # more CPUs than asked: ReqMem is still 100 x ReqCPUS
    ["--mem=0"],  # all of a node's memory
    ["-p", "percpu", "-c", "2", "--mem-per-cpu=0"],
]
# slurm.conf without a default (DefMemPerCPU=0, as a site that sets none): all of a node's memory.
# DefMemPerGPU, the one default left, is not in what 22.05 records: a GPU job's ReqMem is the node's.
WHOLE_NODE_ASKS = [
    [],
    ["-c", "2"],
    ["-N", "2"],
    ["-N", "2", "--mem=0"],
    ["--mem-per-cpu=0"],
    ["--mem=100"],
    ["--gpus=2"],
    ["-N", "2", "--gpus-per-node=1"],
    # CPUs and nodes as the plugin reads them (min_cpus, min_nodes) and accounting (ReqCPUS, ReqNodes)
    ["-N", "2", "--ntasks-per-node=2"],
    ["-n", "4", "-c", "2"],
    ["-N", "1-2"],
    ["--exclusive"],
    ["--mincpus=3"],
    ["-N", "2", "--ntasks-per-node=2", "--mem-per-cpu=100"],
]
# The request features training has from sacct; it has no task count, CPUs per task or time_min
# (NaN in every row it reads, so no tree splits on them).
COMPARED = ("log_cpus", "log_nodes", "log_mem_per_node_mb", "gpus_per_node")
INTS = (
    "min_cpus",
    "min_nodes",
    "num_tasks",
    "cpus_per_task",
    "mem_per_node_mb",
    "mem_per_cpu_mb",
    "gpus_per_node",
)


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    return start_module_cluster(
        job_submit_lua=RECORDER,
        cpus_per_node=4,
        slurm_conf_extra=(
            "PartitionName=percpu Nodes=c1 DefMemPerCPU=300 State=UP\n"
            "PartitionName=pernode Nodes=c1 DefMemPerNode=700 State=UP\n"
        ),
    )


def _served(comment: str) -> JobRequest:
    """The request the plugin would send, from the recorder's comment."""
    fields = dict(word.split("=", 1) for word in comment.split())
    values: dict[str, object] = {k: int(v) for k, v in fields.items() if k in INTS and v != "nil"}
    return JobRequest(partition=fields["partition"], **values)  # type: ignore[arg-type]


def _features(request: JobRequest) -> dict[str, float]:
    row = vectorize([request])[0]
    return {name: float(row[FEATURE_NAMES.index(name)]) for name in COMPARED}


def served_memory_defaults(cluster: SlurmCluster) -> MemoryDefaults:
    """The memory defaults harp serve reads from this cluster's scontrol."""
    applied: list[MemoryDefaults] = []

    def scontrol(argv: Sequence[str]) -> str:
        done = cluster.run(list(argv))
        assert done.returncode == 0, done.stderr
        return done.stdout

    SlurmMemoryDefaults(applied.append, scontrol).poll()
    (defaults,) = applied
    return defaults


def _served_and_trained(
    cluster: SlurmCluster, asks: list[list[str]]
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Each ask's COMPARED features as harp serve builds them, with the defaults it reads from this
    cluster, and as training reads them from the job's accounting."""
    defaults = served_memory_defaults(cluster)
    jobs = {}
    for words in asks:
        result = cluster.sbatch([*words, "-t", "5"], "#!/bin/sh\ntrue\n")
        assert result.returncode == 0 and result.job_id is not None, (words, result.stderr)
        jobs[" ".join(words)] = result.job_id
    served, trained = {}, {}
    for ask, job in jobs.items():
        cluster.wait_state(job, {"COMPLETED"}, timeout=120)
        record = accounted(cluster, job)
        (row,) = cluster.sacct_rows([job], ["JobIDRaw", "Comment", "ReqMem"], allocations_only=True)
        request = request_from_proto(request_to_proto(_served(row["Comment"])), defaults)  # as harp serve
        served[ask] = _features(request)
        trained[ask] = _features(record.request)
        assert trained[ask]["log_mem_per_node_mb"] >= 0, (ask, row)  # accounting holds a memory for each
    return served, trained


def test_a_job_asking_no_memory_is_served_with_the_memory_accounting_records(cluster: SlurmCluster) -> None:
    """Before, the daemon served such a job with no memory (NaN), where its accounting, which
    training reads, holds the default slurmctld gave it; and a job asking --mem=0 with the default,
    where accounting holds the node's memory."""
    served, trained = _served_and_trained(cluster, ASKS)
    assert served == trained


def test_on_a_site_without_a_default_a_job_is_served_with_a_node_s_memory(
    start_cluster: StartCluster,
) -> None:
    """slurm.conf sets no DefMemPerCPU (Slurm's own default): a job asking no memory gets all of a
    node's that MemSpecLimit leaves it, and accounting records that (22.05: the job's total over its
    nodes), a GPU job's too where slurm.conf sets DefMemPerGPU."""
    cluster = start_cluster(
        job_submit_lua=RECORDER,
        cpus_per_node=4,
        nodes=2,
        extra_conf_files={"gres.conf": FAKE_GPUS},
        node_extra="Gres=gpu:4 MemSpecLimit=1000",  # a whole-node job gets 1000 MB less than RealMemory
        slurm_conf_extra="DefMemPerCPU=0\nDefMemPerGPU=1000\nGresTypes=gpu\nAccountingStorageTRES=gres/gpu\n",
    )
    served, trained = _served_and_trained(cluster, WHOLE_NODE_ASKS)
    assert served == trained
    whole = ("", "-c 2", "-N 2", "-N 2 --mem=0", "--mem-per-cpu=0", "--gpus=2")
    assert len({trained[ask]["log_mem_per_node_mb"] for ask in whole}) == 1  # a node's memory
