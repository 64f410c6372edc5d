"""`harp harvest` against a real slurmdbd: a job's step that ended before the harvest window began
still counts. slurmdbd gives a window's jobs only the steps that ran inside it; the harvest reads
the jobs again by id (`sacct -j`, no -S: every step from the epoch)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slurm_harp.accounting.jobstore import JobStore
from tests.e2e.cluster import SlurmCluster
from tests.e2e.harvesting import MEMORY_MB, harvest, settled

TAIL_S = 6  # the batch script's sleep after its memory step: the window starts inside it
# The step holds MEMORY_MB and burns 3 s of CPU time (not of the clock: on a loaded machine 3 s of
# the clock gave it 1.75 s of CPU): JobAcctGatherFrequency=task=1 samples its RSS.
SCRIPT = f"""#!/bin/sh
srun /usr/bin/python3 -c 'import time
x = b"x" * ({MEMORY_MB} << 20)
while time.process_time() < 3:
    pass'
sleep {TAIL_S}
"""


def _utc_rows(cluster: SlurmCluster, args: list[str]) -> list[list[str]]:
    """sacct -P rows (no header) with times in UTC."""
    done = cluster.run(["sacct", "-a", "-P", "-n", "--noconvert", *args], env=cluster.env | {"TZ": "UTC0"})
    assert done.returncode == 0, done.stderr
    return [line.split("|") for line in done.stdout.splitlines() if line]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _ends(cluster: SlurmCluster, job_id: str) -> dict[str, datetime]:
    """End of the job and of its steps .batch and .0, once all three are recorded."""
    deadline = time.monotonic() + 60
    while True:
        rows = _utc_rows(cluster, ["-j", job_id, "-o", "JobIDRaw,End"])
        ends = {raw: _at(end) for raw, end in rows if end not in ("", "Unknown")}
        if {job_id, f"{job_id}.batch", f"{job_id}.0"} <= set(ends):
            return ends
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)


def test_a_step_ended_before_the_window_still_counts(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """Before, the job was stored with its .batch tail's MaxRSS (a shell and srun, a few MB) and
    TotalCPU (~0 s): the memory step had ended before the window's start."""
    cluster = slurm_cluster
    submitted = cluster.sbatch(["-t", "5", "--mem=600M", "-J", "harvest-early-step"], SCRIPT)
    assert submitted.job_id is not None, submitted.stderr
    job_id = str(submitted.job_id)
    settled(cluster, submitted.job_id)
    ends = _ends(cluster, job_id)
    step_end, job_end = ends[f"{job_id}.0"], ends[job_id]
    start = step_end + timedelta(seconds=2)
    assert job_end >= start + timedelta(seconds=2), ends  # the window holds the job's End

    # The window as slurmdbd serves it: the job, without its memory step.
    window = ["-S", start.strftime("%Y-%m-%dT%H:%M:%S"), "-E", "now", "--state=COMPLETED", "-o", "JobIDRaw"]
    shown = {r[0] for r in _utc_rows(cluster, window)}
    assert job_id in shown and f"{job_id}.0" not in shown, shown

    db = tmp_path / "jobs.sqlite"
    harvest(cluster, db, "--start", start.isoformat())
    with JobStore(db) as store:
        (job,) = [r for r in store.records("sacct") if r.job_id == job_id]
    assert job.max_rss_mb is not None and MEMORY_MB * 0.9 <= job.max_rss_mb <= MEMORY_MB * 2, job
    assert job.total_cpu_s is not None and job.total_cpu_s >= 2, job
