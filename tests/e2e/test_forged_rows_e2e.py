"""A user's own free text in accounting (a work dir, a job name) never becomes a row of its own,
nor a harp tag, in what `harp harvest` stores."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.accounting.sacct_runner import SACCT_FIELDS
from slurm_harp.core.text import bounded_text
from tests.e2e.cluster import SlurmCluster
from tests.e2e.harvesting import harvest, settled

US = "\x1f"


def _fake_row(job_id: str, user: str, uid: str, tag: str) -> dict[str, str]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return {
        "JobIDRaw": job_id, "JobID": job_id, "JobName": "forged", "User": user, "UID": uid,
        "Account": "root", "Partition": "batch", "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0",
        "AdminComment": tag, "ElapsedRaw": "600", "TimelimitRaw": "60", "ReqMem": "100M", "MaxRSS": "",
        "ReqCPUS": "1", "AllocCPUS": "1", "NNodes": "1", "NTasks": "", "ReqNodes": "1",
        "TotalCPU": "00:01:00", "ReqTRES": "cpu=1", "Submit": now, "Start": now, "End": now, "WorkDir": "w",
    }  # fmt: skip


def test_a_work_dir_holding_a_whole_row_forges_nothing(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    cluster = slurm_cluster
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 600))
    fake = _fake_row("987654", "victim", "4242", "harp:extend,t!=1,t0=100000,v=forged")
    # The work dir ends with a newline and every column but Flags (sacct prints Flags after it).
    tail = US.join(fake[name] for name in SACCT_FIELDS[:-1])
    work = cluster.jobs_dir / ("d\n" + tail)
    work.mkdir()
    res = cluster.sbatch(["-t", "5", "-J", "plain", f"--chdir={work}"], "#!/bin/sh\nsleep 1\n")
    assert res.job_id is not None, res.stderr
    settled(cluster, res.job_id)
    db = tmp_path / "jobs.sqlite"
    harvest(cluster, db, "--start", start)
    with JobStore(db) as store:
        records = {r.job_id: r for r in store.records("sacct")}
    assert "987654" not in records
    assert all(r.harp_tag is None or "forged" not in r.harp_tag for r in records.values())
    mine = records[str(res.job_id)]
    # Cut to 255 bytes, as every string of a job is (core.text).
    assert mine.request.work_dir == bounded_text(str(work)) and mine.request.job_name == "plain"
