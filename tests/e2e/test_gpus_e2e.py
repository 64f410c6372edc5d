"""GPU jobs on a real slurmctld: the GPUs per node the plugin's request carries are the ones the
harvester reads back from the job's accounting (ReqTRES gres/gpu over ReqNodes), for each way sbatch
asks for GPUs.

The cluster's GPUs are no GPUs: gres.conf gives each node four character devices that are there on
any machine (/dev/null, ...) as its `gpu` files (slurmd 22.05 drops a GPU without a `File`, and a
node whose GPUs fall short of slurm.conf's `Gres=gpu:4` is drained): enough for slurmctld to accept,
schedule and account GPU jobs. A job_submit.lua runs the plugin's own request builder (harp.request)
on the job_desc slurmctld gives it and writes the GPUs per node it would send into the job's comment,
which accounting keeps beside ReqTRES.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.cli import build_parser
from slurm_harp.commands.advise import build_request
from tests.conftest import REPO
from tests.e2e.advice_site import hook_record, recording_hook
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import accounted

GPUS_PER_NODE = 4
FAKE_GPUS = "Name=gpu File=/dev/null,/dev/zero,/dev/full,/dev/urandom\n"
RECORDER = f"""
package.path = "{REPO / "plugin"}/?.lua;" .. package.path
local request = require "harp.request"
function slurm_job_submit(job_desc, part_list, submit_uid)
  local r = request.build(job_desc, submit_uid, part_list)
  job_desc.comment = "gpus=" .. tostring(r.gpus_per_node)
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""
# sbatch's ways of asking for GPUs, and the GPUs per node training reads for each.
ASKS = {
    "--gpus=4": 4,
    "-N 2 --gpus=4": 2,
    "-N 2 --gpus=3": 2,
    "-n 4 --gpus-per-task=2": 8,  # ReqNodes=1: all 8 on the one node accounting names
    "-N 2 --gpus-per-task=1": 1,
    "-N 2 -n 4 --gpus-per-task=1": 2,
    "-N 2 --gpus-per-node=2": 2,
    "--gres=gpu:3": 3,
    "--sockets-per-node=1 --gpus-per-socket=2": 2,
    "-n 4 --ntasks-per-gpu=2": 2,
    # -N (or -B) with a node layout and no -n: sbatch sends a task per socket, core and thread asked
    "-N 2 --cores-per-socket=2 --gpus-per-task=1": 2,
    "-N 1 -B 1:2 --gpus-per-task=1": 2,
    "-B 1:2 --gpus-per-task=1": 2,
    "-B 1 --gpus-per-socket=2": 2,
    "-N 2 --threads-per-core=1 --gpus-per-task=1": 1,
    # -n below -N: sbatch lowers the node count ("setting nnodes to 1")
    "-N 2 -n 1 --gpus=2": 2,
}


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    return start_module_cluster(
        job_submit_lua=RECORDER,
        extra_conf_files={"gres.conf": FAKE_GPUS},
        nodes=2,
        cpus_per_node=4,
        node_extra=f"Gres=gpu:{GPUS_PER_NODE}",
        slurm_conf_extra="GresTypes=gpu\nAccountingStorageTRES=gres/gpu\n",
    )


def test_each_way_of_asking_for_gpus_is_served_as_it_is_trained(cluster: SlurmCluster) -> None:
    """Before, the plugin read GPUs from tres_per_node alone: `--gpus`, `--gpus-per-task`,
    `--gpus-per-socket` and `--ntasks-per-gpu` jobs reached the daemon as jobs of no GPUs."""
    jobs = {}
    for ask in ASKS:
        result = cluster.sbatch([*ask.split(), "-t", "5"], "#!/bin/sh\ntrue\n")
        assert result.returncode == 0 and result.job_id is not None, (ask, result.stderr)
        jobs[ask] = result.job_id
    seen = {}
    for ask, job in jobs.items():
        cluster.wait_state(job, {"COMPLETED"}, timeout=120)
        record = accounted(cluster, job)
        (row,) = cluster.sacct_rows([job], ["JobIDRaw", "Comment", "ReqTRES"], allocations_only=True)
        seen[ask] = (row["Comment"], record.request.gpus_per_node, row["ReqTRES"])
    expected = {ask: (f"gpus={n}", n) for ask, n in ASKS.items()}
    assert {ask: s[:2] for ask, s in seen.items()} == expected, seen


# More ways, for the script reader: tasks per node; --gpus beside --gpus-per-task (sbatch 22.05 refuses
# the two where --gpus is no multiple of it or gives other tasks than -n, and --gpus-per-task with no
# task count at all: `-N 2 -c 2 --gpus-per-task=2`, `--gpus-per-task=1`).
SCRIPT_ASKS = {
    **ASKS,
    "-N 2 --ntasks-per-node=2 --gpus-per-task=1": 2,
    "-n 2 --gpus=4 --gpus-per-task=2": 4,
}
# What the hook cannot tell from sbatch's options, which it sees before sbatch checks them (_opt_verify
# runs after pre_submit): -B from --sockets-per-node and --cores-per-socket (one node's layout: no
# tasks sent without -N), and -n 1 from no -n (no node count lowered).
HOOK_SEES = SCRIPT_ASKS | {"-B 1:2 --gpus-per-task=1": 1, "-N 2 -n 1 --gpus=2": 1}


def test_harp_advise_script_counts_the_gpus_accounting_records(cluster: SlurmCluster, tmp_path: Path) -> None:
    """`harp advise --script` on the very script sbatch submits, and the cli_filter hook in that sbatch,
    give the GPUs per node training reads from the job's accounting. Before, the script reader read
    --gpus-per-task, --gpus-per-socket and --ntasks-per-gpu as no GPUs (`-n 4 --gpus-per-task=2` was
    advised as a CPU job, accounted with 8 GPUs), and both counted -N's tasks by --sockets-per-node
    alone (`-N 2 --cores-per-socket=2 --gpus-per-task=1`: 1 a node, accounted with 2)."""
    env = recording_hook(cluster, tmp_path / "login")  # the hook in the sbatch that submits each
    jobs: dict[str, tuple[int, Path]] = {}
    for ask in SCRIPT_ASKS:
        path = cluster.jobs_dir / f"gpus-{len(jobs)}.sbatch"
        path.write_text(f"#!/bin/sh\n#SBATCH {ask} -t 5\ntrue\n")
        record = env | {"HARP_RECORD": str(tmp_path / f"hook-{len(jobs)}")}
        done = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", str(path)], env=record)
        assert done.returncode == 0, (ask, done.stderr)
        jobs[ask] = (int(done.stdout.strip().split(";")[0]), path)
    seen = {}
    for at, (ask, (job, path)) in enumerate(jobs.items()):
        cluster.wait_state(job, {"COMPLETED"}, timeout=120)
        advised = build_request(build_parser().parse_args(["advise", "--script", str(path)])).job
        hook = hook_record(tmp_path / f"hook-{at}")[1].job
        hook_gpus = hook.gpus_per_node if hook.HasField("gpus_per_node") else None
        seen[ask] = (accounted(cluster, job).request.gpus_per_node, advised.gpus_per_node, hook_gpus)
    expected = {ask: (n, n, HOOK_SEES[ask]) for ask, n in SCRIPT_ASKS.items()}
    assert seen == expected, {ask: s for ask, s in seen.items() if s != expected[ask]}
