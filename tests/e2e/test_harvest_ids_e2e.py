"""`harp harvest` and job ids that name more than one accounting record, on a real cluster.

What sacct shows (Slurm 22.05; the harvester's `--state` of finished states, by End in -S/-E):
- slurmctld started without its StateSaveLocation gives ids from FirstJobId again; accounting keeps
  the old jobs. Without --duplicates sacct shows only the newest record of an id in the window.
- A requeued job's next run is a record of its own whose Submit is the requeue time; the run requeued
  becomes REQUEUED (a finished one too, its End moved to the requeue time), a state the harvester
  does not read, unless preemption requeued it (PREEMPTED, which it reads).
Each record is a job of its own in the store, (source, job_id, submit_time), never mixed with another.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from slurm_harp.accounting import JobRecord
from slurm_harp.accounting.jobstore import JobStore
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import MEMORY_JOB, MEMORY_MB, counts, harvest, harvest_logged, settled

REUSED_LOG = "new jobs have the id of a job already stored"


def _rerun_short(script: str) -> str:
    """``script``, but a run of the job requeued (Slurm sets SLURM_RESTART_COUNT) only sleeps 1 s."""
    return script.replace("#!/bin/sh\n", '#!/bin/sh\n[ -n "$SLURM_RESTART_COUNT" ] && exec sleep 1\n', 1)


def _jobs(db: Path) -> list[JobRecord]:
    with JobStore(db) as store:
        return list(store.records("sacct"))


def _since(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).isoformat()


def _settled_after(cluster: SlurmCluster, job_id: int, submit: str) -> dict[str, str]:
    """The allocation row of ``job_id`` once a record other than the one submitted at ``submit``
    (sacct's Submit) is settled: until then sacct -j shows that older record."""
    deadline = time.monotonic() + 180
    while True:
        (row,) = settled(cluster, job_id, timeout=180)
        if row["Submit"] != submit:
            return row
        assert time.monotonic() < deadline, f"job {job_id} not run again: {row}"
        time.sleep(0.5)


def test_a_job_id_given_again_after_the_controller_lost_its_state_is_a_job_of_its_own(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    """Keyed by id alone, the new job's harvest overwrote the old job's row, keeping the old MaxRSS
    (a maximum over re-reads); and a harvest over both saw only the new one."""
    cluster = start_cluster()
    start = _since(60)
    old = cluster.sbatch(["-t", "5", "-J", "before-reset", "--mem=600M"], MEMORY_JOB)
    assert old.job_id is not None, old.stderr
    (old_row,) = settled(cluster, old.job_id)
    db = tmp_path / "jobs.sqlite"
    harvest(cluster, db, "--start", start)

    cluster.reset_controller()
    new = cluster.sbatch(["-t", "5", "-J", "after-reset"], "#!/bin/sh\nsleep 1\n")
    assert new.job_id == old.job_id, "ids start again at FirstJobId"
    _settled_after(cluster, new.job_id, old_row["Submit"])
    summary, log = harvest_logged(cluster, db)

    jobs = _jobs(db)
    assert [(j.job_id, j.request.job_name) for j in jobs] == [
        (str(old.job_id), n) for n in ("before-reset", "after-reset")
    ]
    before, after = jobs
    assert before.max_rss_mb is not None and before.max_rss_mb >= MEMORY_MB * 0.9, before
    assert after.max_rss_mb is not None and after.max_rss_mb < MEMORY_MB / 2, after
    assert before.end_time is not None and after.request.submit_time is not None
    assert after.request.submit_time >= before.end_time
    assert counts(summary) == (0, 1, 0) and f"1 {REUSED_LOG}" in log, (summary, log)

    # A harvest over both records at once (a first run, or --start after an outage) reads both.
    fresh = tmp_path / "fresh.sqlite"
    harvest(cluster, fresh, "--start", start)
    assert _jobs(fresh) == jobs


def _requeue_now(cluster: SlurmCluster, job_id: int) -> None:
    """Requeue the job and let it start again at once (Slurm holds a requeued job back ~2 minutes)."""
    done = cluster.run(["scontrol", "requeue", str(job_id)])
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 60
    while cluster.scontrol_show_job(job_id).get("JobState") != "PENDING":  # a running job completes first
        assert time.monotonic() < deadline, cluster.scontrol_show_job(job_id)
        time.sleep(0.2)
    # The requeue revoked the run's credential on its node, and slurmd refuses a launch whose
    # credential is not younger than that ("Job credential revoked": the run FAILED at once). Slurm's
    # own hold of a requeued job covers this; skipping it, let the clock pass the revocation's second.
    time.sleep(2.0)
    done = cluster.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
    assert done.returncode == 0, done.stderr


def test_each_run_of_a_requeued_job_the_harvester_read_is_stored_whole(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A finished job harvested, then requeued and run again, keeps its first run as read; the next
    run is a job of its own. Keyed by id alone, the next run overwrote the first but kept its MaxRSS.
    A job requeued while running leaves one job: its last run."""
    cluster = slurm_cluster
    start = _since(60)
    finished = cluster.sbatch(["-t", "5", "-J", "requeue-finished", "--mem=600M"], _rerun_short(MEMORY_JOB))
    running = cluster.sbatch(["-t", "5", "-J", "requeue-running"], _rerun_short("#!/bin/sh\nsleep 30\n"))
    assert finished.job_id is not None and running.job_id is not None, (finished.stderr, running.stderr)
    (first_run,) = settled(cluster, finished.job_id)
    cluster.wait_state(running.job_id, ("RUNNING",), settled=False)
    db = tmp_path / "jobs.sqlite"
    harvest(cluster, db, "--start", start)
    running_submit = cluster.scontrol_show_job(running.job_id)["SubmitTime"]

    _requeue_now(cluster, finished.job_id)
    _requeue_now(cluster, running.job_id)
    next_run = _settled_after(cluster, finished.job_id, first_run["Submit"])
    last_run = _settled_after(cluster, running.job_id, running_submit)
    _, log = harvest_logged(cluster, db, "--start", start)  # this test's jobs: others share the cluster

    jobs = _jobs(db)
    runs = [j for j in jobs if j.job_id == str(finished.job_id)]
    assert [(j.state, j.elapsed_s) for j in runs] == [
        ("COMPLETED", int(first_run["ElapsedRaw"])), ("COMPLETED", int(next_run["ElapsedRaw"]))
    ]  # fmt: skip
    assert runs[0].max_rss_mb is not None and runs[0].max_rss_mb >= MEMORY_MB * 0.9, runs
    assert runs[1].max_rss_mb is not None and runs[1].max_rss_mb < MEMORY_MB / 2, runs
    (last,) = [j for j in jobs if j.job_id == str(running.job_id)]
    assert (last.state, last.elapsed_s) == ("COMPLETED", int(last_run["ElapsedRaw"]))
    assert f"1 {REUSED_LOG}" in log, log
