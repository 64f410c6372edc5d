"""`harp guard` on the jobs a bare job id does not address alone, and on reservations, in real Slurm.

The jobs are tagged and their limits set by hand (as root, as the plugin and an earlier guard would
have), then one `harp guard --once` runs against the real squeue and scontrol:
- an array whose own record runs a task (its raw id is the array's id, which Slurm's update takes
  for the whole array): only that task is extended, the others keep their limits;
- a heterogeneous job whose leader is due: only the leader is extended, not its other component;
- a job beside an active core-based reservation on its node is extended, and so is a job submitted
  with --reservation=R1,R2 running in R1, by steps and not capped by R2's end (R2 is elsewhere).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import SlurmCluster, StartCluster

TAG = "harp:extend,t!=1,t0=10,v=e2e"
# Every job is cut to 1 minute by its tag; a due one has its limit set to 2 (less than the guard's
# lead of 120 s left), the others to 8 (as if extended further already). Extended by steps from 1 (1+1,
# 1+5, ...) to at least the lead from now, a due job gets 6.
DUE, FURTHER, EXTENDED = 2, 8, 6
LISTING = "--Format=JobID:0|,JobArrayID:0|,ArrayJobID:0|,HetJobID:0|,TimeLimit:0|,State:0|"
GuardOnce = Callable[[], str]


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    # Heterogeneous jobs are started by the backfill scheduler only: run it every second.
    return start_module_cluster(nodes=4, cpus_per_node=8, scheduler_parameters="bf_interval=1")


@pytest.fixture
def guard_once(cluster: SlurmCluster, tmp_path: Path) -> Iterator[GuardOnce]:
    """One `harp guard --once` (its log returned); the test's jobs are cancelled after the test."""
    config = tmp_path / "guard.toml"
    files = f'heartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n'
    config.write_text(f'[guard]\n{files}extension = "steps"\nlead_seconds = 120\n')

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-m", "slurm_harp.cli", "guard", "--once", "--config", str(config)],
            capture_output=True, text=True, env=cluster.env, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stderr

    yield run
    cluster.run(["scancel", "--user=root"])


def listing(cluster: SlurmCluster, ids: set[int]) -> list[dict[str, str]]:
    """The jobs of the arrays, heterogeneous jobs and jobs ``ids`` (an earlier test's may linger)."""
    done = cluster.run(["squeue", "--noheader", LISTING])
    assert done.returncode == 0, done.stderr
    keys = ("raw", "address", "array", "het", "limit", "state")
    rows = [dict(zip(keys, line.split("|"), strict=False)) for line in done.stdout.splitlines() if line]
    wanted = {str(i) for i in ids}
    return [r for r in rows if r["array"] in wanted or r["het"] in wanted]


def wait_running(
    cluster: SlurmCluster, ids: set[int], count: int, timeout: float = 60
) -> list[dict[str, str]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = listing(cluster, ids)
        if len(jobs) == count and all(j["state"] == "RUNNING" for j in jobs):
            return jobs
        time.sleep(0.5)
    raise AssertionError(f"not all {count} jobs running: {listing(cluster, ids)}")


def tag_and_limit(cluster: SlurmCluster, address: str, minutes: int) -> None:
    done = cluster.run(
        ["scontrol", "update", f"JobId={address}", f"AdminComment={TAG}", f"TimeLimit={minutes}"]
    )
    assert done.returncode == 0, done.stderr


def limits(cluster: SlurmCluster, ids: set[int]) -> dict[str, str]:
    return {j["address"]: j["limit"] for j in listing(cluster, ids)}


def minutes(n: int) -> str:
    return f"{n}:00"


def test_array_task_and_het_component_are_extended_alone(
    cluster: SlurmCluster, guard_once: GuardOnce
) -> None:
    array = cluster.sbatch(["--array=0-2", "-n1", "-t", "10"], "#!/bin/sh\nsleep 600\n")
    het = cluster.sbatch(["-t", "10"], "#!/bin/sh\n#SBATCH -n1\n#SBATCH hetjob\n#SBATCH -n1\nsleep 600\n")
    assert array.job_id and het.job_id, (array.stderr, het.stderr)
    ids = {array.job_id, het.job_id}
    jobs = wait_running(cluster, ids, 5)
    # The array's own record runs one task: the record a bare `JobId=<array>` would take as the array.
    (own,) = [j for j in jobs if j["raw"] == str(array.job_id)]
    assert own["address"] != own["raw"] and own["address"].startswith(f"{array.job_id}_"), jobs
    leader, other = f"{het.job_id}+0", f"{het.job_id}+1"
    assert {leader, other} <= {j["address"] for j in jobs}, jobs
    for job in jobs:
        tag_and_limit(cluster, job["address"], DUE if job["address"] in (own["address"], leader) else FURTHER)

    log = guard_once()

    after = limits(cluster, ids)
    assert after[own["address"]] == minutes(EXTENDED), (after, log)
    assert after[leader] == minutes(EXTENDED), (after, log)
    others = [a for a in after if a not in (own["address"], leader)]
    assert len(others) == 3 and all(after[a] == minutes(FURTHER) for a in others), (after, log)
    assert re.search(rf"job {re.escape(own['address'])}: time limit {DUE} -> {EXTENDED} min", log), log
    assert re.search(rf"job {re.escape(leader)}: time limit {DUE} -> {EXTENDED} min", log), log


def test_core_reservation_beside_and_own_reservations_do_not_refuse(
    cluster: SlurmCluster, guard_once: GuardOnce
) -> None:
    for spec in (
        ["ReservationName=cores", "StartTime=now", "Duration=120", "Nodes=c4", "CoreCnt=2"],
        ["ReservationName=R1", "StartTime=now", "Duration=120", "Nodes=c3"],
        ["ReservationName=R2", "StartTime=now", "Duration=4", "Nodes=c2"],
    ):
        made = cluster.run(["scontrol", "create", "reservation", *spec, "Users=root"])
        assert made.returncode == 0, made.stderr
    beside = cluster.sbatch(["-w", "c4", "-n1", "-t", "10"], "#!/bin/sh\nsleep 600\n")
    inside = cluster.sbatch(["--reservation=R1,R2", "-w", "c3", "-n1", "-t", "10"], "#!/bin/sh\nsleep 600\n")
    assert beside.job_id and inside.job_id, (beside.stderr, inside.stderr)
    ids = {beside.job_id, inside.job_id}
    jobs = wait_running(cluster, ids, 2)
    shown = cluster.scontrol_show_job(inside.job_id)
    assert shown["Reservation"] == "R1,R2" and shown["NodeList"] == "c3", shown
    for job in jobs:
        tag_and_limit(cluster, job["address"], DUE)

    log = guard_once()

    after = limits(cluster, ids)
    assert after == {str(beside.job_id): minutes(EXTENDED), str(inside.job_id): minutes(EXTENDED)}, log
    assert "not extended" not in log and "capped" not in log, log
