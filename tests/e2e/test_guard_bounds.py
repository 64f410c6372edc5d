"""`harp guard` as a real process on a real cluster, on limits squeue and scontrol print that bound or
outgrow an extension:
(a) a time_min job submitted with --deadline, which Slurm starts with a limit that ends by it: the
    guard reads its deadline (squeue's Deadline) and does not extend it past;
(b) a partition whose QOS (``scontrol update PartitionName=debug QOS=short``) has a MaxWall: its jobs
    are extended up to it, not past (scontrol's ``QoS=``, sacctmgr's Flags);
(c) a user's own limit of 400 days, which squeue prints INVALID: the guard reads it, as over a year;
(d) an account (students) under one whose MaxWall is 4 minutes (dept): its jobs inherit it, and are
    extended up to it, not past (sacctmgr's associations, squeue's Cluster, Account and UserName);
(e) the same two MaxWall on a cluster that enforces no limits (AccountingStorageEnforce unset, as on
    the other modules' clusters): Slurm runs a job past them to its own limit, and so does the guard.
This module's cluster enforces limits (``AccountingStorageEnforce=associations,limits``), so that the
MaxWall of (b) and (d) are Slurm's: a job asking its own 10 minutes waits for ever, and the jobs are
submitted as harp's plugin leaves them, cut to 2 minutes. The tags are set by hand, as root (as the
plugin would have); the guard polls every second, with a lead of LEAD_S, so that each job is due at
once and would otherwise be extended to 6 minutes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import test_guard_changes as changes
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.cluster_config import CLUSTER_NAME
from tests.e2e.test_guard import GuardProcess
from tests.e2e.test_guard_changes import (
    EXTEND,
    TIME_MIN,
    followed,
    log_of,
    polled,
    squeue,
    submit,
    update,
    wait_for,
)

# Slurm checks a QOS's and an association's MaxWall only with `limits` (22.05 ACCOUNTING_ENFORCE_LIMITS);
# root has an association on each account it submits to (research, and students below).
ENFORCE_LIMITS = "AccountingStorageEnforce=associations,limits\n"


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    return with_maxwalls(start_module_cluster(nodes=2, cpus_per_node=2, slurm_conf_extra=ENFORCE_LIMITS))


@pytest.fixture(scope="module")
def unenforced(start_module_cluster: StartCluster) -> SlurmCluster:
    """The same MaxWall on a cluster that enforces no limits."""
    return with_maxwalls(start_module_cluster(nodes=2, cpus_per_node=2))


def with_maxwalls(cluster: SlurmCluster) -> SlurmCluster:
    """``cluster`` with partition debug's QOS short (MaxWall 3 minutes) and root's association on
    students, below dept (MaxWall 4 minutes)."""
    added = cluster.run(["sacctmgr", "-i", "add", "qos", "short", "MaxWall=00:03:00"])
    assert added.returncode == 0, added.stderr
    # slurmctld learns of the new QOS from slurmdbd a moment later.
    wait_for(
        "slurmctld to know QOS short",
        lambda: cluster.run(["scontrol", "update", "PartitionName=debug", "QOS=short"]).returncode == 0,
    )
    for add in (
        ["account", "dept", f"cluster={CLUSTER_NAME}", "MaxWall=00:04:00"],
        ["account", "students", "parent=dept", f"cluster={CLUSTER_NAME}"],
        ["user", "root", "account=students", f"cluster={CLUSTER_NAME}"],
    ):
        added = cluster.run(["sacctmgr", "-i", "add", *add])
        assert added.returncode == 0, added.stderr
    # slurmctld's own view: the association of root on students, dept's limit pre-propagated into it.
    shown = ["scontrol", "show", "assoc_mgr", "flags=assoc", "accounts=students", "users=root"]
    wait_for("slurmctld to know students", lambda: "MaxWallPJ=4" in cluster.run(shown).stdout)
    return cluster


# A running guard (its first poll done: the bounds read) on this module's cluster.
guard = changes.guard


@pytest.fixture
def unenforced_guard(unenforced: SlurmCluster, tmp_path: Path) -> Iterator[GuardProcess]:
    with changes.running_guard(unenforced, tmp_path) as process:
        yield process


def test_a_job_started_to_meet_its_deadline_is_not_extended_past_it(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    job = submit(cluster, "-w", "c1", "--time-min=1", "--deadline=now+170seconds", "--hold")
    update(cluster, job, f"AdminComment={TIME_MIN}")
    assert cluster.run(["scontrol", "release", str(job)]).returncode == 0
    wait_for("the job to run", lambda: squeue(cluster, job)[0] == "RUNNING")
    started_with = squeue(cluster, job)[1]
    assert started_with in ("1:00", "2:00")  # Slurm's cut: (deadline - start) / 60, not its 10 minutes
    polled(tmp_path)
    time.sleep(2)
    assert squeue(cluster, job)[1] == started_with, log_of(tmp_path)
    assert f"job {job}: not extended past {started_with.split(':')[0]} min (its deadline " in log_of(tmp_path)


def test_a_partition_s_qos_maxwall_caps_an_extension(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    held(cluster, "QOSMaxWallDurationPerJobLimit", "-p", "debug")
    job = started_cut(cluster, "-p", "debug", "-w", "c2")
    assert_capped(cluster, job, tmp_path, 3, "its partition's QOS short MaxWall")  # not 6 minutes
    assert "slurmctld enforces limits (AccountingStorageEnforce=associations,limits)" in log_of(tmp_path)


def test_a_limit_over_a_year_is_read_not_skipped(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    job = submit(cluster, "-t", "400-0", "--hold")
    update(cluster, job, "AdminComment=harp:time_min,t~=60,t0=576000,v=e2e")
    assert squeue(cluster, job)[1] == "INVALID"  # squeue's word for over a year
    # Written within a minute (a job first seen waits for the next save).
    wait_for("the guard to write it", lambda: followed(tmp_path, job) is not None, timeout=90)
    entry = followed(tmp_path, job)
    assert entry is not None and entry[2:5] == [True, 576000, 525601] and entry[6] is None
    assert "skipped" not in log_of(tmp_path)


def test_an_inherited_account_maxwall_caps_an_extension(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    # Slurm checks an association's MaxWall as a job is submitted and before it starts, never as an
    # operator raises its limit: the guard bounds its extensions at it itself.
    held(cluster, "AssocMaxWallDurationPerJobLimit", "-A", "students")
    job = started_cut(cluster, "-A", "students", "-w", "c2")
    # dept's MaxWall, inherited (sacctmgr prints it in root's row on students), not 6 minutes
    assert_capped(cluster, job, tmp_path, 4, "association of root on account students MaxWall")


def test_without_enforced_limits_a_job_is_extended_past_a_maxwall_to_its_own_limit(
    unenforced: SlurmCluster, unenforced_guard: GuardProcess, tmp_path: Path
) -> None:
    # Slurm runs each job to its own 5 minutes, past its partition QOS's 3 and its account's 4: so
    # does the guard. Bounded at either (the guard before), it was killed there, before its own limit.
    jobs = [
        submit(unenforced, "-p", "debug", "-w", "c1", "-t", "5"),
        submit(unenforced, "-A", "students", "-w", "c2", "-t", "5"),
    ]
    running = ("RUNNING", "5:00")
    wait_for("Slurm to run them 5 minutes", lambda: all(squeue(unenforced, j)[:2] == running for j in jobs))
    for job in jobs:
        update(unenforced, job, "AdminComment=harp:extend,t!=1,t0=5,v=e2e", "TimeLimit=2")
    wait_for("the jobs to be extended", lambda: all(squeue(unenforced, j)[1] != "2:00" for j in jobs))
    polled(tmp_path)
    log = log_of(tmp_path)
    for job in jobs:
        assert squeue(unenforced, job)[1] == "5:00", log
        assert f"job {job}: time limit 2 -> 5 min by a step (own 5, " in log
    assert "capped" not in log
    assert "slurmctld enforces no limits (AccountingStorageEnforce=none)" in log


def held(cluster: SlurmCluster, reason: str, *args: str) -> None:
    """A job asking its own 10 minutes waits, for ``reason``: the bound is Slurm's."""
    job = submit(cluster, *args)
    shown = ["squeue", "--noheader", f"--jobs={job}", "--format=%r"]
    wait_for(f"Slurm to hold job {job} ({reason})", lambda: cluster.run(shown).stdout.strip() == reason)


def started_cut(cluster: SlurmCluster, *args: str) -> int:
    """A job as harp's plugin leaves one asking 10 minutes in extend mode: its limit 2, its tag
    naming its own 10; once it runs."""
    job = submit(cluster, *args, "-t", "2", "--hold")
    update(cluster, job, f"AdminComment={EXTEND}")
    assert cluster.run(["scontrol", "release", str(job)]).returncode == 0
    wait_for("the job to run", lambda: squeue(cluster, job)[0] == "RUNNING")
    return job


def assert_capped(cluster: SlurmCluster, job: int, tmp_path: Path, bound: int, why: str) -> None:
    """The guard extends ``job``, running at 2 minutes of its own 10, to ``bound`` alone."""
    wait_for("the job to be extended", lambda: squeue(cluster, job)[1] != "2:00")
    polled(tmp_path)
    assert squeue(cluster, job)[1] == f"{bound}:00", log_of(tmp_path)
    assert f"job {job}: time limit 2 -> {bound} min by a step (own 10" in log_of(tmp_path)
    assert f"capped by {why}" in log_of(tmp_path)
