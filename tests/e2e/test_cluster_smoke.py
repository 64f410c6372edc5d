"""The test cluster itself: jobs run, accounting sees them, a job_submit.lua is applied and reloaded."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.e2e.cluster import SlurmCluster, StartCluster

pytestmark = pytest.mark.e2e

TAGGING_LUA = """
function slurm_job_submit(job_desc, part_list, submit_uid)
  local tag = "harp-e2e:@VERSION@"
  -- Append: other site tools write admin_comment too.
  if job_desc.admin_comment == nil or job_desc.admin_comment == "" then
    job_desc.admin_comment = tag
  else
    job_desc.admin_comment = job_desc.admin_comment .. ";" .. tag
  end
  slurm.log_user("harp-e2e: @VERSION@ saw %s", job_desc.user_name)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"""


def _lua(version: str) -> str:
    return TAGGING_LUA.replace("@VERSION@", version)


def _report_start(cluster: SlurmCluster, record_property: Callable[[str, object], None]) -> None:
    assert cluster.start_seconds is not None
    phases = ", ".join(f"{k} {v:.2f}s" for k, v in cluster.phase_seconds.items())
    print(f"cluster start {cluster.start_seconds:.2f}s ({phases})")
    record_property("cluster_start_seconds", round(cluster.start_seconds, 3))


def _batch_step(cluster: SlurmCluster, job_id: int, timeout: float = 15.0) -> dict[str, str]:
    # Step records reach slurmdbd asynchronously; give the .batch line a moment to carry MaxRSS.
    deadline = time.monotonic() + timeout
    while True:
        rows = cluster.sacct_rows([job_id], ["JobIDRaw", "State", "MaxRSS"])
        step = next((r for r in rows if r["JobIDRaw"] == f"{job_id}.batch"), None)
        if (step is not None and step["MaxRSS"]) or time.monotonic() > deadline:
            assert step is not None, f"no .batch step for job {job_id} in {rows}"
            return step
        time.sleep(0.2)


def test_sleep_job_completes_and_is_accounted(
    slurm_cluster: SlurmCluster, record_property: Callable[[str, object], None]
) -> None:
    _report_start(slurm_cluster, record_property)
    res = slurm_cluster.sbatch(["-t", "2", "-J", "harp-smoke"], "#!/bin/sh\nsleep 1\n")
    assert res.returncode == 0, res.stderr
    assert res.job_id is not None, res.stdout

    assert slurm_cluster.wait_state(res.job_id, {"COMPLETED"}, timeout=60) == "COMPLETED"

    fields = ["JobIDRaw", "JobName", "State", "ElapsedRaw", "TimelimitRaw", "Account", "Partition", "User"]
    (job,) = slurm_cluster.sacct_rows([res.job_id], fields, allocations_only=True)
    assert job["JobName"] == "harp-smoke"
    assert job["State"] == "COMPLETED"
    assert int(job["ElapsedRaw"]) >= 1
    assert job["TimelimitRaw"] == "2"
    assert job["Account"] == "research"
    assert job["Partition"] == "batch"
    assert job["User"] == "root"

    step = _batch_step(slurm_cluster, res.job_id)
    assert step["State"] == "COMPLETED"
    assert int(step["MaxRSS"]) > 0, step


def test_job_submit_lua_tags_and_talks_to_user(
    start_cluster: StartCluster, record_property: Callable[[str, object], None]
) -> None:
    cluster = start_cluster(job_submit_lua=_lua("v1"))
    _report_start(cluster, record_property)

    res = cluster.sbatch(["-t", "1", "-A", "teaching", "-p", "debug"], "#!/bin/sh\ntrue\n")
    assert res.returncode == 0, res.stderr
    assert res.job_id is not None
    assert "harp-e2e: v1 saw root" in res.stderr + res.stdout
    assert cluster.scontrol_show_job(res.job_id)["AdminComment"] == "harp-e2e:v1"

    assert cluster.wait_state(res.job_id, {"COMPLETED"}) == "COMPLETED"
    (row,) = cluster.sacct_rows([res.job_id], ["AdminComment", "Account", "Partition"], allocations_only=True)
    assert row == {"AdminComment": "harp-e2e:v1", "Account": "teaching", "Partition": "debug"}

    # A new script is picked up by the next submission without restarting slurmctld.
    cluster.write_job_submit(_lua("v2"))
    res2 = cluster.sbatch(["-t", "1", "--wrap", "true"], "")
    assert res2.returncode == 0, res2.stderr
    assert "harp-e2e: v2 saw root" in res2.stderr
    assert res2.job_id is not None
    assert cluster.scontrol_show_job(res2.job_id)["AdminComment"] == "harp-e2e:v2"

    # A broken script is refused by slurmctld, which keeps the last good one (submissions still work).
    cluster.write_job_submit("this is not Lua (")
    res3 = cluster.sbatch(["-t", "1", "--wrap", "true"], "")
    assert res3.returncode == 0, res3.stderr
    assert "harp-e2e: v2 saw root" in res3.stderr
    assert "using previous script" in cluster.slurmctld_log()


def test_several_virtual_nodes_run_one_job_each(start_cluster: StartCluster) -> None:
    cluster = start_cluster(nodes=2)
    sinfo = cluster.run(["sinfo", "-h", "-N", "-p", "batch", "-o", "%N %T"]).stdout
    assert sorted(sinfo.splitlines()) == ["c1 idle", "c2 idle"]
    # Each job wants both cores of a node and outlives a scheduler tick, so they land on different nodes.
    jobs = [cluster.sbatch(["-c", "2", "--mem=100", "-t", "1"], "#!/bin/sh\nsleep 4\n") for _ in range(2)]
    ids = [j.job_id for j in jobs if j.job_id is not None]
    assert len(ids) == 2, jobs
    for job_id in ids:
        assert cluster.wait_state(job_id, {"COMPLETED"}) == "COMPLETED"
    rows = cluster.sacct_rows(ids, ["JobIDRaw", "NodeList", "AllocCPUS"], allocations_only=True)
    assert sorted(r["NodeList"] for r in rows) == ["c1", "c2"]
    assert {r["AllocCPUS"] for r in rows} == {"2"}
