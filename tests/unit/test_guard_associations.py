"""An association's MaxWall as a bound of the guard's extensions (guard.associations, guard.bounds;
Slurm faked at the subprocess boundary). The tables are laid out as `sacctmgr -nP show assoc
format=Cluster,Account,User,Partition,ParentName,MaxWall` prints them on Slurm 22.05."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.associations import parse_associations
from slurm_harp.guard.bounds import Bounds
from slurm_harp.guard.qos import parse_qos
from slurm_harp.guard.running import SQUEUE_ARGV, parse_running
from tests.unit.test_guard import NOW, FakeSlurm, count, line, make_guard

EXTEND = "harp:extend,t!=40,t0=600,v=x"
# students (under dept) with a MaxWall of 2 hours, as sacctmgr prints it: in every row below it.
STUDENTS = (
    "harp|root||||\nharp|dept|||root|\nharp|students|||dept|02:00:00\nharp|students|alice|||02:00:00\n"
    "harp|research|||root|\nharp|research|alice|||\n"
)
# The same limit set on dept, printed without the parents' limits (WOPLimits): only dept's row has it.
DEPT_ONLY = "harp|root||||\nharp|dept|||root|02:00:00\nharp|students|||dept|\nharp|students|alice|||\n"


def run_to_the_end(slurm: FakeSlurm, tmp_path: Path) -> tuple[list[int], CollectorRegistry]:
    """The audit's job: asked 600 min, cut to 40; polled each time it falls due, until the guard
    stops extending it. Its extensions, and the registry."""
    guard, registry = make_guard(slurm, tmp_path)
    limit = 40
    for _ in range(12):
        used = limit * 60 - 90
        clock = f"{used // 3600}:{used // 60 % 60:02d}:{used % 60:02d}"
        slurm.listing = (
            line("5", f"{limit // 60}:{limit % 60:02d}:00", clock, EXTEND, account="students") + "\n"
        )
        guard.poll()
        if slurm.updates:
            limit = slurm.updates[-1][1]
    return [minutes for _, minutes in slurm.updates], registry


def test_an_account_s_maxwall_caps_the_extensions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    # The audit's case: Slurm would hold a job asking 600 min on an account whose MaxWall is 2 hours;
    # cut by harp to 40 it ran, and the guard extended it to 600 (41, 45, ... 340, 600): past the
    # account's limit, which Slurm does not check on an operator's update.
    slurm = FakeSlurm([])
    slurm.associations = STUDENTS
    extensions, registry = run_to_the_end(slurm, tmp_path)
    assert extensions == [41, 45, 55, 70, 100, 120]
    assert count(registry, results.CAPPED) == 1 and count(registry, results.REFUSED_BOUND) == 1
    assert "capped by association of alice on account students MaxWall" in caplog.text
    assert "not extended past 120 min (association of alice on account students MaxWall)" in caplog.text
    # One sacctmgr call for every association at the bounds' read, none per job.
    assert sum("assoc" in argv for argv in slurm.calls) == 1


def test_an_inherited_limit_is_found_up_the_account_tree(tmp_path: Path) -> None:
    # Rows printed without their parents' limits: the user's and students' rows set none, dept's does.
    slurm = FakeSlurm([])
    slurm.associations = DEPT_ONLY
    extensions, _ = run_to_the_end(slurm, tmp_path)
    assert extensions == [41, 45, 55, 70, 100, 120]
    table = parse_associations(DEPT_ONLY)
    assert table.max_wall("harp", "students", "alice", "batch") == (120, "account dept MaxWall")
    # A user not listed (added since the read, or a name squeue could not resolve: "nobody"): no
    # bound, since their own association may allow more than the account (the review's case).
    assert table.max_wall("harp", "students", "bob", "batch") is None
    assert table.max_wall("harp", "students", "nobody", "batch") is None
    assert table.max_wall("harp", "unknown", "alice", "batch") is None


def test_the_user_s_association_and_a_per_partition_one_come_first() -> None:
    table = parse_associations(
        "harp|root||||\nharp|Dept|||root|02:00:00\nharp|students|||dept|02:00:00\n"
        "harp|students|alice|||08:00:00\nharp|students|alice|debug||00:30:00\n"
        "harp|students|carol|debug||\n"
    )
    # Her own association's 8 hours, above the account's, as Slurm takes it (the child's own limit).
    assert table.max_wall("harp", "students", "Alice", "batch") == (
        480,
        "association of alice on account students MaxWall",
    )
    # Her association on partition debug: 30 minutes there.
    assert table.max_wall("harp", "Students", "alice", "debug") == (
        30,
        "association of alice on account students in partition debug MaxWall",
    )
    # carol's debug association sets none: its parent is the account (not her other association).
    assert table.max_wall("harp", "students", "carol", "debug") == (120, "account students MaxWall")


def test_a_qos_maxwall_passes_over_the_association_s() -> None:
    # Slurm 22.05 (_validate_time_limit, acct_policy_job_runnable_pre_select) checks an association's
    # MaxWall only where no QOS of the job set one, larger or smaller.
    associations = parse_associations(STUDENTS)
    qos = parse_qos("normal||\nlong|2-00:00:00|\nshort|01:00:00|\n")
    bounds = Bounds(qos=qos, associations=associations, limits_enforced=True)

    def bound(qos_name: str, partition: str = "batch") -> tuple[int | None, str]:
        text = line("5", "40:00", "39:00", EXTEND, partition=partition, account="students")
        (job,) = parse_running(text.replace("|normal|", f"|{qos_name}|"))
        return bounds.limit_for(job, NOW)

    assert bound("normal") == (120, "association of alice on account students MaxWall")
    assert bound("long") == (2880, "QOS long MaxWall")  # two days, above the account's 2 hours
    assert bound("short") == (60, "QOS short MaxWall")
    # A partition's QOS with a MaxWall passes over it too.
    partitioned = Bounds(
        qos=qos, associations=associations, partition_qos={"batch": "long"}, limits_enforced=True
    )
    (job,) = parse_running(line("5", "40:00", "39:00", EXTEND, account="students"))
    assert partitioned.limit_for(job, NOW) == (2880, "its partition's QOS long MaxWall")


def test_another_cluster_s_associations_bound_nothing_here() -> None:
    # One slurmdbd keeps several clusters: squeue's Cluster names the job's.
    table = parse_associations(
        "other|root||||\nother|students|||root|00:05:00\nother|students|alice|||\nharp|students|||root|\n"
    )
    assert table.max_wall("harp", "students", "alice", "batch") is None
    assert table.max_wall("other", "students", "alice", "batch") == (5, "account students MaxWall")


def test_sacctmgr_failing_keeps_the_last_read_and_never_read_bounds_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As for the QOS: a read that fails, or lists nothing, keeps the last good one; a guard that has
    # never read them extends without them, rather than stop every job at its cut. Each poll, a new
    # job cut to 40 min is due at 100 (its next step: 160).
    clock = [NOW]

    def due(job: str) -> str:
        return line(job, "1:40:00", "1:38:30", EXTEND, account="students") + "\n"

    slurm = FakeSlurm([due("5")])
    slurm.associations, slurm.associations_fail = STUDENTS, True
    guard, registry = make_guard(slurm, tmp_path, clock=lambda: clock[0])
    guard.poll()
    assert slurm.updates == [("5", 160)]  # nothing known of them yet
    assert "could not read associations: sacctmgr: error: Problem talking to the database" in caplog.text
    for job, fails, listed in (("6", False, STUDENTS), ("7", True, STUDENTS), ("8", False, "")):
        clock[0] += 61  # the bounds are read again
        slurm.associations_fail, slurm.associations, slurm.listing = fails, listed, due(job)
        guard.poll()
        assert slurm.updates[-1] == (job, 120), job  # read, then the last read kept
    assert count(registry, results.CAPPED) == 3
    assert "associations: sacctmgr listed none (exit 0): the last read kept" in caplog.text


def test_a_line_or_limit_that_does_not_read(caplog: pytest.LogCaptureFixture) -> None:
    table = parse_associations(
        "harp|root||||\nharp|dept|||root|02:00:00\nharp|students|||dept|soon\ngarbled line\n"
        "harp|students|alice|||soon\nharp|students|bob|||\nharp|lab|||dept|\nharp|lab|carol|||\n"
    )
    # A MaxWall on the way that does not read (logged): no bound, not its parent's, which may be
    # lower than the one Slurm holds the job to.
    assert table.max_wall("harp", "students", "alice", "batch") is None
    assert table.max_wall("harp", "students", "bob", "batch") is None
    assert table.max_wall("harp", "lab", "carol", "batch") == (120, "account dept MaxWall")
    assert "association 'harp/students/alice' MaxWall unreadable" in caplog.text
    assert "association line skipped (1 fields, expected 6)" in caplog.text
    # A loop in the listing (no tree Slurm keeps) ends the walk.
    looped = parse_associations("harp|a|||b|\nharp|b|||a|\n")
    assert looped.max_wall("harp", "a", "alice", "batch") is None


def test_squeue_is_asked_for_the_job_s_association() -> None:
    fields = SQUEUE_ARGV[-1].removeprefix("--Format=").split(",")
    assert fields[8:11] == ["Cluster:0|", "Account:0|", "UserName:0|"] and fields[-1] == "admin_comment:0|"
    (job,) = parse_running(line("5", "40:00", "39:00", EXTEND, account="students"))
    assert (job.cluster, job.account, job.user, job.qos) == ("harp", "students", "alice", "normal")
