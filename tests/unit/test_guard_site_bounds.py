"""Bounds on a job's extension beyond reservations: its own --deadline, and the MaxWall of its
partition's QOS (guard.bounds, guard.qos; Slurm faked at the subprocess boundary)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.qos import QosTable, parse_partition_qos, parse_qos
from slurm_harp.guard.running import SQUEUE_ARGV, parse_running
from tests.unit.test_guard import NOW, FakeSlurm, count, line, make_guard, polled
from tests.unit.test_guard_lowered import EXTEND, pending


def utc(seconds: float) -> str:
    """A time as squeue prints it (SLURM_TIME_FORMAT=standard, in UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_squeue_is_asked_for_the_deadline_before_the_comment() -> None:
    fields = SQUEUE_ARGV[-1].removeprefix("--Format=").split(",")
    assert fields[-2:] == ["Deadline:0|", "admin_comment:0|"]


def test_a_job_is_never_extended_past_its_deadline(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The audit's case: cut from 600 to 40 min, submitted with --deadline 30 min after it starts:
    # Slurm starts it with 30 min (job_scheduler.c, backfill.c), and never stops it for the deadline
    # later. The guard extended it to 41, past the time its user gave.
    started = NOW - 29 * 60
    deadline = utc(started + 30 * 60 + 20)
    slurm, _ = polled(
        tmp_path,
        [pending("5", "40:00", EXTEND)],
        [line("5", "30:00", "29:00", EXTEND, deadline=deadline)],
    )
    assert slurm.updates == []
    assert f"job 5: not extended past 30 min (its deadline {deadline}Z)" in caplog.text
    # Further off, it caps an extension: 40 + 1 min, then 40 + 15 is past it (50 min from its start;
    # the faked clock stands still, so the run times place the start 44 min before NOW).
    far = utc(NOW - 44 * 60 + 50 * 60)
    slurm = FakeSlurm([line("6", "40:00", "39:00", EXTEND, deadline=far)])
    guard, registry = make_guard(slurm, tmp_path / "2")
    guard.poll()
    slurm.listing = line("6", "45:00", "44:00", EXTEND, deadline=far) + "\n"
    guard.poll()
    assert slurm.updates == [("6", 41), ("6", 50)] and count(registry, results.CAPPED) == 1


@pytest.mark.parametrize("none", ["N/A", "Unknown", "None"])
def test_slurm_s_words_for_no_deadline_are_none(none: str) -> None:
    (job,) = parse_running(line("5", "40:00", "39:00", EXTEND, deadline=none))
    assert job.deadline is None


def test_a_deadline_that_does_not_read_skips_the_line(caplog: pytest.LogCaptureFixture) -> None:
    unread: set[str] = set()
    assert list(parse_running(line("5", "40:00", "39:00", EXTEND, deadline="soon"), unread)) == []
    assert unread == {"5"} and "skipped" in caplog.text


def test_a_partition_s_qos_maxwall_bounds_its_jobs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The audit's case: PartitionName=batch QOS=short, short's MaxWall 1 hour. Slurm holds every job
    # of the partition to it (unless its own QOS has OverPartQOS); the guard read only the job's QOS
    # and extended a job cut to 60 min to 70.
    slurm = FakeSlurm([line("9", "1:00:00", "59:00", EXTEND)])
    slurm.partitions = "PartitionName=batch MaxTime=UNLIMITED QoS=short State=UP\n"
    slurm.qos = "normal||\nshort|01:00:00|DenyOnLimit\n"
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1
    assert "not extended past 60 min (its partition's QOS short MaxWall)" in caplog.text


@pytest.mark.parametrize(
    ("partition_qos", "job_qos", "table", "bound", "whose"),
    [
        # The review's case: PartitionName=batch QOS=Part_Long, which scontrol prints as typed and
        # sacctmgr as accounting keeps it; slurmctld matches the two in any case (_list_find_qos).
        ("Part_Long", "normal", "normal||\npart_long|01:00:00|\n", 60, "its partition's QOS part_long"),
        ("part_long", "normal", "normal||\nPart_Long|01:00:00|\n", 60, "its partition's QOS part_long"),
        # The job's own QOS in another case, OverPartQOS: its 50 min come first.
        ("Part_Long", "Over", "part_long|01:00:00|\nover|00:50:00|OverPartQOS\n", 50, "QOS over"),
    ],
    ids=["partition-as-typed", "table-in-capitals", "job-over-part-qos"],
)
def test_qos_names_match_in_any_case(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    partition_qos: str,
    job_qos: str,
    table: str,
    bound: int,
    whose: str,
) -> None:
    # Compared as printed, no QOS was found: the job was extended past the MaxWall, to 70 or 55 min.
    due = line("9", f"{bound}:00", f"{bound - 1}:00", EXTEND).replace("|normal|", f"|{job_qos}|")
    slurm = FakeSlurm([due])
    slurm.partitions = f"PartitionName=batch MaxTime=7-00:00:00 QoS={partition_qos} State=UP\n"
    slurm.qos = table
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1
    assert f"not extended past {bound} min ({whose} MaxWall)" in caplog.text


@pytest.mark.parametrize(
    ("job_qos", "bound", "alone"),
    [
        ("normal", 60, None),  # no MaxWall of its own: the partition's QOS's
        ("long", 60, 2880),  # 2 days of its own, but the partition's QOS comes first
        ("over", 120, 120),  # OverPartQOS: its own 2 hours come first
        ("overopen", 60, None),  # OverPartQOS without a MaxWall: the partition's QOS's then
        ("short", 60, 60),  # the partition's QOS itself
    ],
)
def test_a_partition_qos_bounds_as_slurm_orders_them(job_qos: str, bound: int, alone: int | None) -> None:
    table = parse_qos(
        "normal||\nlong|2-00:00:00|\nshort|01:00:00|\nover|02:00:00|DenyOnLimit,OverPartQOS\n"
        "overopen||OverPartQOS\n"
    )
    wall = table.max_wall(job_qos, "short")
    assert wall is not None and wall[0] == bound
    assert (table.max_wall(job_qos, None) or (None,))[0] == alone  # a partition without a QOS


def test_partition_qos_reads_as_scontrol_prints_it() -> None:
    text = "PartitionName=a QoS=short MaxTime=1:00:00\nPartitionName=b QoS=N/A\nPartitionName=c AllowQos=x\n"
    assert parse_partition_qos(text) == {"a": "short"}
    assert QosTable().max_wall("normal", "short") is None
