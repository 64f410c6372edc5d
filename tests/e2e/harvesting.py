"""What the harvester's end-to-end tests share: jobs, waiting for accounting to settle, and running
`harp harvest` as the timer does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from slurm_harp.accounting.sacct_runner import decode_output, one_job
from slurm_harp.core.job import JobRecord
from tests.e2e.cluster import TERMINAL_STATES, SlurmCluster

MEMORY_MB = 200
MEMORY_JOB = (
    f"#!/bin/sh\n/usr/bin/python3 -c 'import time; x = b\"x\" * ({MEMORY_MB} << 20); time.sleep(4)'\n"
)


def settled(
    cluster: SlurmCluster, job_id: int, tasks: int = 1, timeout: float = 120.0
) -> list[dict[str, str]]:
    """Allocation rows of a job (every task of an array) once terminal and fully recorded, batch steps too."""
    fields = ["JobIDRaw", "JobID", "State", "Partition", "ElapsedRaw", "Submit", "End", "MaxRSS"]
    deadline = time.monotonic() + timeout
    while True:
        rows = cluster.sacct_rows([job_id], fields)
        jobs = [r for r in rows if "." not in r["JobIDRaw"]]
        batch = {r["JobIDRaw"].split(".")[0]: r for r in rows if r["JobIDRaw"].endswith(".batch")}
        done = len(jobs) == tasks and all(
            r["State"].split()[0] in TERMINAL_STATES
            and r["Partition"]
            and batch.get(r["JobIDRaw"], {}).get("MaxRSS")
            for r in jobs
        )
        if done:
            return jobs
        assert time.monotonic() < deadline, f"job {job_id} not settled in accounting: {rows}"
        time.sleep(0.3)


def harvest(cluster: SlurmCluster, db: Path, *extra: str, zone: str | None = None) -> str:
    """Run `harp harvest` (in the time zone ``zone``, a TZ value, if given); its summary line."""
    return harvest_logged(cluster, db, *extra, zone=zone)[0]


def harvest_logged(cluster: SlurmCluster, db: Path, *extra: str, zone: str | None = None) -> tuple[str, str]:
    """Like harvest(); the summary line and the log (stderr)."""
    bin_dir = os.path.dirname(sys.executable)
    env = cluster.env | {"PATH": f"{cluster.env['PATH']}:/usr/bin:{bin_dir}"} | ({"TZ": zone} if zone else {})
    argv = [sys.executable, "-m", "slurm_harp.cli", "harvest", "--db", str(db), "--settle-seconds", "0"]
    done = subprocess.run([*argv, *extra], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    print(line)  # shown with -s: what an operator sees
    return line, done.stderr


def counts(summary: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+) bad lines, (\d+) new, (\d+) updated", summary)
    assert m is not None, summary
    bad, new, updated = (int(g) for g in m.groups())
    return bad, new, updated


def accounted(cluster: SlurmCluster, job: int, timeout: float = 60.0) -> JobRecord:
    """The job as the harvester reads it from sacct, once accounting has it."""

    def runner(argv: Sequence[str]) -> str:
        done = subprocess.run(list(argv), capture_output=True, env=cluster.env, timeout=60, check=True)
        return decode_output(done.stdout, "sacct")

    deadline = time.monotonic() + timeout
    while (record := one_job(runner, str(job))) is None:
        assert time.monotonic() < deadline, f"job {job} not in accounting after {timeout:.0f} s"
        time.sleep(0.3)
    return record
