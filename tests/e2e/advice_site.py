"""What the advice e2e tests share: a public cluster, a user's runs of one job name at two sizes (1 CPU
for 20 s, 2 CPUs for 6 s: the 2-CPU run is the cheaper), harvested from real sacct, and a `harp serve`
with an advice socket that every user reaches."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.daemon_process import DaemonProcess
from tests.e2e.harvesting import harvest

# (tasks, seconds) of the two runs
SIZES = ((1, 20), (2, 6))


def open_site(start_cluster: StartCluster, **cluster_args: Any) -> Iterator[tuple[SlurmCluster, Path]]:
    """For a test module's ``site`` fixture: the cluster (SlurmCluster's ``cluster_args`` beside its
    own) and a work directory every user may enter."""
    # Wider than this machine (sleep jobs use no CPU): the jobs run at once.
    cluster = start_cluster(public=True, cpus_per_node=4, **cluster_args)
    work = Path(tempfile.mkdtemp(prefix="harp-advise-"))
    work.chmod(0o755)  # the advice socket's directory: every user reaches it
    try:
        yield cluster, work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def submit_two_sizes(cluster: SlurmCluster, name: str) -> list[int]:
    """Job ids of ``name`` run as root at each of SIZES (not waited for)."""
    ids = []
    for tasks, seconds in SIZES:
        done = cluster.sbatch(["-J", name, "-n", str(tasks), "-t", "5"], f"#!/bin/sh\nsleep {seconds}\n")
        assert done.job_id is not None, done.stderr
        ids.append(done.job_id)
    return ids


def advice_daemon(cluster: SlurmCluster, work: Path) -> DaemonProcess:
    """`harp serve` (not started) on the history harvested into ``work``/jobs.sqlite, advising on
    ``work``/advice.sock."""
    harvest(cluster, work / "jobs.sqlite")
    return DaemonProcess(
        work,
        work / "store",  # no model: the advice needs none
        extra=f'[history]\ndb = "{work / "jobs.sqlite"}"\n[advice]\nsocket = "{work / "advice.sock"}"\n',
        env=cluster.env,  # the daemon reads the partitions with this cluster's scontrol
    )
