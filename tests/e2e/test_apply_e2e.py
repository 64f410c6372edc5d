"""What Slurm makes of a decision the plugin applied: a real slurmctld runs our job_submit.lua, and a
gRPC server on the plugin's socket answers every Predict with the Decision a test gives it.

The nodes have 4 CPUs (configured wider than this machine: the jobs only sleep) and the cluster's
DefMemPerCPU is 512 MB. What the plugin writes into job_desc is checked where it counts: the CPUs and
memory slurmctld gives the job, as scontrol shows them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.tag import parse_tag
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.daemon_process import GarbageGrpcServer, plugin_config
from tests.integration.lua_driver import PLUGIN_ROOMY_MS

CPUS_PER_NODE = 4


def cpu_cut(cpus: int, asked: int) -> pb.Decision:
    """A rewrite-mode Decision that cuts a job of ``asked`` CPUs to ``cpus``, as the daemon writes it."""
    basis = "(90% of similar past jobs finished within it)"
    return pb.Decision(
        mode="rewrite",
        targets=[
            pb.TargetDecision(
                target=pb.TARGET_CPUS, action=pb.ACTION_REWRITE, predicted=cpus, quantile=0.9, new_value=cpus,
                model_version="cpus@1",
            )
        ],
        user_message=f"harp: lowered cpus from {asked} cpus to {cpus} cpus {basis}.",
        annotation=f"harp:rewrite,c!={cpus}/q0.9,c0={asked},v=cpus@1",
    )  # fmt: skip


class Site:
    """The cluster, and where the plugin asks for its decisions."""

    def __init__(self, cluster: SlurmCluster, work: Path) -> None:
        self.cluster = cluster
        self.socket = work / "harp.sock"

    def submit(self, decision: pb.Decision, *directives: str, hold: bool = True) -> tuple[int, str]:
        """(job id, sbatch's stderr) of a sleeping job with ``directives``, the plugin answered
        ``decision``: a real gRPC server on its socket for the submission."""
        script = "#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives) + "sleep 60\n"
        with GarbageGrpcServer(self.socket, decision.SerializeToString()):
            result = self.cluster.sbatch(["-H"] if hold else [], script)
        self.socket.unlink(missing_ok=True)
        assert result.returncode == 0 and result.job_id is not None, result.stderr
        return result.job_id, result.stderr


@pytest.fixture(scope="module")
def site(start_module_cluster: StartCluster) -> Iterator[Site]:
    work = Path(tempfile.mkdtemp(prefix="harp-apply-"))
    work.chmod(0o755)
    conf = plugin_config(work, deadline_ms=PLUGIN_ROOMY_MS, breaker_seconds=0)
    cluster = start_module_cluster(
        job_submit_lua=(REPO / "plugin" / "job_submit.lua").read_text(),
        extra_conf_files={"harp_plugin.lua": conf},
        cpus_per_node=CPUS_PER_NODE,
    )
    try:
        yield Site(cluster, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def running(cluster: SlurmCluster, job_id: int, timeout: float = 30.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while (job := cluster.scontrol_show_job(job_id))["JobState"] != "RUNNING":
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return job


def test_a_cpu_cut_gives_the_job_the_cpus_its_tag_says(site: Site) -> None:
    """sbatch -c 4 sends pn_min_cpus = 4 beside cpus_per_task, and slurmctld allocates at least that
    many CPUs per node: cut in cpus_per_task and min_cpus alone, the job ran on 4 CPUs while its tag
    and its user were told 1."""
    cluster = site.cluster
    job_id, stderr = site.submit(cpu_cut(1, asked=4), "-t 10", "-c 4", "--mem=1000", hold=False)
    try:
        job = running(cluster, job_id)
        assert (job["NumCPUs"], job["CPUs/Task"], job["MinCPUsNode"]) == ("1", "1", "1"), job
        tag = parse_tag(job["AdminComment"])
        assert tag is not None and tag.flags["c"] == "!" and tag.values["c"] == 1 and tag.own["c"] == 4, tag
        assert "harp: lowered cpus from 4 cpus to 1 cpus" in stderr, stderr
    finally:
        cluster.run(["scancel", str(job_id)])


def test_a_job_without_memory_keeps_its_cpus(site: Site) -> None:
    """Without --mem or --mem-per-cpu a job gets DefMemPerCPU x its CPUs: a CPU cut would have cut its
    memory too, with no memory decision and below any floor."""
    cluster = site.cluster
    job_id, stderr = site.submit(cpu_cut(1, asked=4), "-t 10", "-c 4")
    try:
        job = cluster.scontrol_show_job(job_id)
        assert (job["NumCPUs"], job["CPUs/Task"], job["MinMemoryCPU"]) == ("4", "4", "512M"), job
        tag = parse_tag(job["AdminComment"])
        assert tag is not None and tag.flags["c"] == "" and tag.values["c"] == 1, tag
        assert "harp: lowered" not in stderr, stderr
    finally:
        cluster.run(["scancel", str(job_id)])


def test_a_job_whose_mincpus_asks_more_keeps_its_cpus(site: Site) -> None:
    """--mincpus above -c is the user's own least CPUs per node, which harp does not lower."""
    cluster = site.cluster
    job_id, stderr = site.submit(cpu_cut(1, asked=2), "-t 10", "-c 2", "--mincpus=4", "--mem=1000")
    try:
        job = cluster.scontrol_show_job(job_id)
        assert (job["CPUs/Task"], job["MinCPUsNode"]) == ("2", "4"), job
        tag = parse_tag(job["AdminComment"])
        assert tag is not None and tag.flags["c"] == "", tag
        assert "harp: lowered" not in stderr, stderr
    finally:
        cluster.run(["scancel", str(job_id)])
