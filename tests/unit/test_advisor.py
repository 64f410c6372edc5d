"""server.advisor: the caller's uid, not the request, decides whose jobs are read; scontrol's partitions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.advice.recommend import Ask
from slurm_harp.config import parse
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.server.advisor import (
    CONFIG_ARGV,
    NODES_ARGV,
    PARTITIONS_ARGV,
    USERS_ARGV,
    AdviceRefused,
    Advisor,
    SlurmPartitions,
    UnknownUser,
)
from slurm_harp.server.advisor import user_name as real_user_name

PARTITION = "PartitionName=batch MaxNodes=UNLIMITED MaxTime=60 TotalCPUs=8 TotalNodes=1 TRES=cpu=8,node=1"
NAMES = {1000: "ann", 1001: "bob"}


def job(job_id: str, user: str, cpus: int, seconds: int) -> JobRecord:
    request = JobRequest(user_name=user, job_name="sim", min_cpus=cpus, submit_time=int(job_id))
    return JobRecord(job_id=job_id, request=request, state="COMPLETED", elapsed_s=seconds, alloc_cpus=cpus)


def runner(argv: Sequence[str]) -> str:
    return PARTITION if tuple(argv) == PARTITIONS_ARGV else "PriorityFlags = MAX_TRES\n"


@pytest.fixture
def advisor(tmp_path: Path) -> Advisor:
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge([job("1", "ann", 1, 600), job("2", "ann", 2, 240), job("3", "bob", 8, 10)], "sacct")
    settings = parse({"history": {"db": str(tmp_path / "jobs.sqlite")}})
    return Advisor(settings, SlurmPartitions(runner), name_of=lambda uid: NAMES[uid])


def test_the_uid_decides_whose_runs_are_read(advisor: Advisor) -> None:
    forged = Ask(JobRequest(user_name="bob", user_id=1001, job_name="sim"))
    advice = advisor.advise(1000, forged)
    assert advice.user == "ann" and advice.evidence.describe() == "1 run at 1 CPU, 1 at 2 CPUs"
    assert advisor.advise(1001, forged).evidence.describe() == "1 run at 8 CPUs"
    # The partition came from scontrol: 8 CPUs at most, MaxTime 60.
    assert {o.size for o in advice.options} == {1, 2, 4, 8}
    assert advice.options[0].quote is not None and advice.options[0].quote.cap_minutes == 60


def test_refusals(advisor: Advisor, tmp_path: Path) -> None:
    with pytest.raises(UnknownUser, match="uid 54321 has no user name"):
        real_user_name(54321)
    (tmp_path / "jobs.sqlite").write_bytes(b"not a database at all" * 100)
    for leftover in tmp_path.glob("jobs.sqlite-*"):
        leftover.unlink()
    with pytest.raises(AdviceRefused, match="the site's job history cannot be read now"):
        advisor.advise(1000, Ask(JobRequest(job_name="sim")))


def test_no_history_configured_is_said() -> None:
    advisor = Advisor(parse({}), SlurmPartitions(runner), name_of=lambda uid: "ann")
    advice = advisor.advise(1000, Ask(JobRequest(job_name="sim")))
    assert advice.evidence.runs == () and "the site keeps no job history ([history] db)" in advice.notes


def test_partitions_are_read_now_and_then_and_kept_when_scontrol_fails() -> None:
    calls: list[tuple[str, ...]] = []
    now = [0.0]
    failing = [False]

    def counted(argv: Sequence[str]) -> str:
        calls.append(tuple(argv))
        if failing[0]:
            raise RuntimeError("scontrol: slurmctld is down")
        return runner(argv)

    partitions = SlurmPartitions(counted, refresh_seconds=300, clock=lambda: now[0])
    site = partitions()
    table, shapes = site.table, site.shapes
    assert calls == [PARTITIONS_ARGV, CONFIG_ARGV, NODES_ARGV, USERS_ARGV] and set(shapes) == {"batch"}
    assert "--all" in calls[0]  # Hidden partitions and those the daemon's user may not use too
    assert table.mode.value == "max_tres" and table.partitions["batch"].max_minutes == 60
    now[0] = 299
    partitions()
    assert len(calls) == 4  # not read again yet
    now[0], failing[0] = 300, True
    assert partitions().shapes == shapes  # read again, failed: the last reading stays
    assert len(calls) == 5


def test_a_node_s_memory_is_read_from_its_nodes_and_kept_when_they_do_not_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What a job may hold of a node is RealMemory less MemSpecLimit (scontrol show node), not the
    partition's TRES, which counts RealMemory whole: the advice proposed, and priced, memory Slurm
    never gives. When the nodes do not read, the last reading stays, said once."""
    tres = PARTITION.replace("node=1", "mem=22900M,node=1")
    nodes = ["NodeName=c1 RealMemory=22900 MemSpecLimit=1000 Partitions=batch"]

    def runner(argv: Sequence[str]) -> str:
        if tuple(argv) == NODES_ARGV:
            return nodes[0]
        return tres if tuple(argv) == PARTITIONS_ARGV else ""

    now = [0.0]
    partitions = SlurmPartitions(runner, refresh_seconds=300, clock=lambda: now[0])
    assert partitions().shapes["batch"].mem_per_node_mb == 21900
    with caplog.at_level("WARNING", logger="slurm_harp.server.advisor"):
        for later in (300, 600):
            now[0], nodes[0] = later, "NodeName=c1 RealMemory=lots Partitions=batch"
            assert partitions().shapes["batch"].mem_per_node_mb == 21900
    (said,) = [r.getMessage() for r in caplog.records]
    assert "cannot read the nodes' memory (keeping the last reading)" in said
    assert "node c1: RealMemory='lots' is no size in MB" in said
    # None read yet: the partition's TRES per node, as before.
    assert SlurmPartitions(runner)().shapes["batch"].mem_per_node_mb == 22900


def test_a_partition_with_no_nodes_is_read_with_the_others() -> None:
    """slurm.conf allows a partition with no nodes; scontrol prints its TRES as "(null)". Read as
    one more error, it cost the advice every partition (none known at the daemon's start)."""
    empty = "PartitionName=future MaxTime=60 TotalCPUs=0 TotalNodes=0 Nodes=(null) TRES=(null)"

    def runner(argv: Sequence[str]) -> str:
        return f"{PARTITION}\n{empty}" if "partition" in argv else ""

    shapes = SlurmPartitions(runner)().shapes
    assert sorted(shapes) == ["batch", "future"]
    assert (shapes["future"].gpus, shapes["future"].mem_mb, shapes["batch"].cpus) == (0, 0.0, 8)


def test_one_partition_that_does_not_read_costs_that_partition_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """scontrol's text was read whole: one record with a field in a form not known here (here a
    TRES count) raised, and the advice lost every partition, none known at the daemon's start. Now
    that partition alone is out, the note says it does not read (not "no such partition"), the
    log names it once, and a partition read well before keeps its reading."""
    odd = "PartitionName=gpu MaxTime=60 TotalCPUs=64 TotalNodes=2 TRES=cpu=64,node=2,gres/gpu=lots"
    text = [f"{PARTITION}\n{odd}"]

    def runner(argv: Sequence[str]) -> str:
        return text[0] if tuple(argv) == PARTITIONS_ARGV else ""

    now = [0.0]
    partitions = SlurmPartitions(runner, refresh_seconds=300, clock=lambda: now[0])
    advisor = Advisor(parse({}), partitions, name_of=lambda uid: "ann")
    with caplog.at_level("WARNING", logger="slurm_harp.server.advisor"):
        everything = advisor.advise(1000, Ask(JobRequest(job_name="sim", min_cpus=1)))
        named = advisor.advise(1000, Ask(JobRequest(job_name="sim", min_cpus=1), partitions=("gpu",)))
        now[0] = 300
        partitions()  # the same reading again: not logged again
    assert {o.partition for o in everything.options} == {"batch"}
    said = "not compared, scontrol's description of it does not read: gpu"
    assert said in everything.notes and said in named.notes
    assert not any("no such partition" in n for n in (*everything.notes, *named.notes))
    assert named.options == ()
    logged = [r.getMessage() for r in caplog.records]
    assert logged == [
        "advice: scontrol partition gpu does not read (left out of the advice): "
        "TRES gres/gpu: bad count 'lots': expected digits 0-9"
    ]
    # A partition read well before keeps that reading when its record stops reading.
    text[0] = f"{PARTITION}\n{odd.replace('gres/gpu=lots', 'gres/gpu=8')}"
    now[0] = 600
    assert partitions().shapes["gpu"].gpus == 8
    text[0] = (
        f"{PARTITION.replace('TotalCPUs=8', 'TotalCPUs=eight')}\n{odd.replace('gres/gpu=lots', 'gres/gpu=8')}"
    )
    now[0] = 900
    site = partitions()
    assert site.shapes["batch"].cpus == 8 and "batch" in site.unread
    assert site.table.partitions["batch"].max_minutes == 60
