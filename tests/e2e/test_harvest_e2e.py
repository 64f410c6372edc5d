"""`harp harvest` against a real cluster: finished jobs (one failing, an array, one using memory) land in
the job store with the states, run times and step MaxRSS that sacct reports; a second run changes
nothing; a later job is then the only addition and moves the cursor. A harvester whose local clock
has just gone back an hour stores a job's true times."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from slurm_harp.accounting import JobRecord
from slurm_harp.accounting.jobstore import JobStore
from tests.conftest import store_checksum
from tests.e2e.cluster import SlurmCluster
from tests.e2e.harvesting import MEMORY_JOB, MEMORY_MB, counts, harvest, harvest_logged, settled
from tests.e2e.zones import zone_falling_back_at


def _stored(db: Path) -> tuple[dict[str, JobRecord], str, int | None]:
    with JobStore(db) as store:
        return {r.job_id: r for r in store.records("sacct")}, store_checksum(store), store.cursor("sacct")


def test_harvest_a_real_cluster_twice_then_once_more(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    cluster = slurm_cluster
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 600))
    submitted = {
        "ok": cluster.sbatch(["-t", "5", "-J", "harvest|ok"], "#!/bin/sh\nsleep 2\n"),
        "fail": cluster.sbatch(["-t", "5", "-J", "harvest-fail"], "#!/bin/sh\nsleep 1\nexit 1\n"),
        "mem": cluster.sbatch(["-t", "5", "-J", "harvest-mem", "--mem=600M"], MEMORY_JOB),
        "array": cluster.sbatch(["-t", "5", "-J", "harvest-arr", "--array=1-3"], "#!/bin/sh\nsleep 1\n"),
    }
    ids = {}
    for name, res in submitted.items():
        assert res.job_id is not None, res.stderr
        ids[name] = res.job_id
    rows = {name: settled(cluster, job_id, 3 if name == "array" else 1) for name, job_id in ids.items()}

    db = tmp_path / "jobs.sqlite"
    first = harvest(cluster, db, "--start", start)
    jobs, checksum, cursor = _stored(db)
    assert counts(first)[0] == 0 and counts(first)[1] == len(jobs), first
    for name, allocations in rows.items():
        for row in allocations:
            job = jobs[row["JobIDRaw"]]
            assert job.state == row["State"].split()[0], (name, job)
            assert job.elapsed_s == int(row["ElapsedRaw"]) >= 1, (name, job)
            assert job.request.partition == "batch" and job.request.time_limit_minutes == 5
            assert job.request.is_array is (name == "array")
    assert jobs[str(ids["ok"])].request.job_name == "harvest|ok"
    assert jobs[str(ids["ok"])].state == "COMPLETED"
    assert jobs[str(ids["fail"])].state == "FAILED"
    assert sorted(r["JobID"] for r in rows["array"]) == [f"{ids['array']}_{i}" for i in (1, 2, 3)]
    # MaxRSS comes from the steps (the job line has none): the python job held 200 MB.
    (mem_row,) = rows["mem"]
    mem = jobs[mem_row["JobIDRaw"]]
    assert mem.max_rss_mb is not None and MEMORY_MB * 0.9 <= mem.max_rss_mb <= MEMORY_MB * 2, mem
    small = jobs[str(ids["ok"])].max_rss_mb
    assert small is not None and small < MEMORY_MB / 2
    assert cursor == max(j.end_time for j in jobs.values() if j.end_time is not None)

    second = harvest(cluster, db)  # from the cursor, minus the overlap
    assert counts(second) == (0, 0, 0), second
    assert _stored(db)[1] == checksum

    late = cluster.sbatch(["-t", "5", "-J", "harvest-late"], "#!/bin/sh\nsleep 1\n")
    assert late.job_id is not None, late.stderr
    (late_row,) = settled(cluster, late.job_id)
    third = harvest(cluster, db)
    after, _, moved = _stored(db)
    assert counts(third) == (0, 1, 0), third
    assert set(after) - set(jobs) == {str(late.job_id)}
    assert all(after[k] == v for k, v in jobs.items())
    assert moved is not None and cursor is not None and moved > cursor
    assert moved == after[str(late.job_id)].end_time
    assert late_row["State"] == after[str(late.job_id)].state == "COMPLETED"


def test_a_job_cancelled_before_it_started_is_no_bad_line(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """sacct prints the ReqMem of a job cancelled before slurmctld gave it memory (held, no --mem)
    as Slurm's NO_VAL64, 18446744073709551616.00M. Each such job was a bad line, a warning
    ("number out of range") at every harvest: at a site, every job cancelled while it waited. It is
    a job that never ran: left out, as one that ran 0 seconds is."""
    cluster = slurm_cluster
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 600))
    held = cluster.run(["sbatch", "--parsable", "--hold", "-t", "5", "-o", "/dev/null", "--wrap", "true"])
    assert held.returncode == 0, held.stderr
    job_id = held.stdout.strip().split(";")[0]
    assert cluster.run(["scancel", job_id]).returncode == 0
    row = ""
    for _ in range(60):
        shown = cluster.run(
            ["sacct", "-a", "-P", "-n", "--noconvert", "-X", "-j", job_id, "-o", "State,ReqMem"]
        )
        row = shown.stdout.strip()
        if row.startswith("CANCELLED"):
            break
        time.sleep(0.5)
    assert row.split("|")[-1] == "18446744073709551616.00M", row  # what this test is about
    summary, log = harvest_logged(cluster, tmp_path / "jobs.sqlite", "--start", start)
    assert counts(summary)[0] == 0 and "out of range" not in log, summary + log


def test_a_node_running_two_tasks_holds_both_their_peaks(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """MaxRSS is one task's peak: a step of two tasks holding MEMORY_MB each held twice that on its
    node, and the store keeps the node's (max_rss_mb is MB per node: memory is advised and cut from
    it). Before, one task's."""
    cluster = slurm_cluster
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 600))
    held = f"import time; x = b'x' * ({MEMORY_MB} << 20); time.sleep(4)"
    script = f'#!/bin/sh\nsrun -n 2 /usr/bin/python3 -c "{held}"\n'
    submitted = cluster.sbatch(["-t", "5", "-n", "2", "--mem=1000M", "-J", "harvest-tasks"], script)
    assert submitted.job_id is not None, submitted.stderr
    settled(cluster, submitted.job_id)
    fields = ["JobIDRaw", "NTasks", "NNodes", "MaxRSS", "State"]
    deadline = time.monotonic() + 60
    while not [r for r in cluster.sacct_rows([submitted.job_id], fields) if r["JobIDRaw"].endswith(".0")]:
        assert time.monotonic() < deadline, cluster.sacct_rows([submitted.job_id], fields)
        time.sleep(0.3)
    (step,) = [r for r in cluster.sacct_rows([submitted.job_id], fields) if r["JobIDRaw"].endswith(".0")]
    assert (step["NTasks"], step["NNodes"], step["State"]) == ("2", "1", "COMPLETED"), step

    db = tmp_path / "jobs.sqlite"
    harvest(cluster, db, "--start", start)
    job = _stored(db)[0][str(submitted.job_id)]
    assert job.max_rss_mb is not None and 2 * MEMORY_MB * 0.9 <= job.max_rss_mb <= 2 * MEMORY_MB * 2, job


def test_a_harvester_whose_clock_just_went_back_stores_true_times(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """sacct prints, and reads -S/-E, in its process's local time; in the hour repeated when clocks
    go back those times are ambiguous. A job harvested there was read an hour early, or not at all
    (the window's end read an hour early too): sacct must run in UTC."""
    cluster = slurm_cluster
    before = time.time()
    zone = zone_falling_back_at(int(before) - 120)
    clocks = [
        cluster.run(["date", "-d", f"@{t}", "+%T %Z"], env=cluster.env | {"TZ": zone}).stdout.strip()
        for t in (int(before) - 3600, int(before))
    ]
    assert clocks[0].split()[0] == clocks[1].split()[0] and clocks[0] != clocks[1], (zone, clocks)
    submitted = cluster.sbatch(["-t", "5", "-J", "harvest-zone"], "#!/bin/sh\nsleep 2\n")
    assert submitted.job_id is not None, submitted.stderr
    settled(cluster, submitted.job_id)
    after = time.time()

    db = tmp_path / "jobs.sqlite"
    start = datetime.fromtimestamp(before - 60, UTC).isoformat()
    summary = harvest(cluster, db, "--start", start, zone=zone)
    jobs, _, cursor = _stored(db)
    job = jobs.get(str(submitted.job_id))
    assert job is not None, (zone, summary)
    times = (job.request.submit_time, job.start_time, job.end_time)
    assert all(t is not None and before - 2 <= t <= after + 2 for t in times), (zone, before, times, after)
    assert job.end_time is not None and job.start_time is not None
    assert job.end_time - job.start_time == job.elapsed_s >= 2
    assert cursor == job.end_time
