"""`harp guard` with Slurm faked at the subprocess boundary (guard.slurm.Runner)."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.commands import guard as guard_command
from slurm_harp.config import GuardSettings
from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.bounds import (
    Bounds,
    Reservation,
    parse_partition_max,
    parse_qos,
    parse_reservations,
)
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.guard.hostlist import expand
from slurm_harp.guard.loop import Guard, PollReport
from slurm_harp.guard.running import SQUEUE_ARGV, parse_running
from slurm_harp.guard.slurm import Completed

NOW = 1_800_000_000.0
BOOTED = "2027-01-15T07:00:00"  # slurmctld's start, an hour before NOW (in SLURM_ZONE)


SUBMITTED = "2026-11-27T10:00:00"


def line(
    job: str,
    limit: str,
    used: str,
    comment: str,
    partition: str = "batch",
    nodes: str = "c1",
    state: str = "R",
    restarts: int = 0,
    deadline: str = "N/A",
    account: str = "research",
) -> str:
    """One line of SQUEUE_ARGV's output (a job of alice on cluster harp)."""
    head = f"{job}|{state}|{restarts}|{SUBMITTED}|{limit}|{used}|{partition}"
    return f"{head}|normal|harp|{account}|alice|(null)|{nodes}|{deadline}|{comment}|"


class FakeSlurm:
    """squeue answers ``listing``; scontrol update succeeds unless the job is in ``gone`` (it ended)
    or ``refused`` (scontrol fails); sinfo answers ``node_cores``, scontrol show partition
    ``partitions``, scontrol show config a BOOT_TIME of ``booted`` and an AccountingStorageEnforce
    of ``enforce`` (None: no such line; fails with ``config_fails``), sacctmgr show qos ``qos`` and
    sacctmgr show assoc ``associations`` (fails with ``associations_fail``). ``calls``: every argv,
    in order."""

    def __init__(
        self,
        listing: Sequence[str],
        gone: Sequence[str] = (),
        reservations: str = "",
        node_cores: str = "c[1-8]|2|4\n",
        refused: Sequence[str] = (),
    ) -> None:
        self.listing = "\n".join(listing) + "\n"
        self.gone, self.refused = set(gone), set(refused)
        self.reservations = reservations or "No reservations in the system\n"
        self.node_cores = node_cores
        self.partitions = "PartitionName=batch MaxTime=UNLIMITED State=UP QoS=N/A\n"
        self.qos = "normal||\nlong|2-00:00:00|\n"  # sacctmgr's Name|MaxWall|Flags
        # sacctmgr's Cluster|Account|User|Partition|ParentName|MaxWall: no MaxWall
        self.associations = "harp|root||||\nharp|research|||root|\nharp|research|alice|||\n"
        self.booted = BOOTED
        self.enforce: str | None = "associations,limits"  # as scontrol prints slurm.conf's "limits"
        self.updates: list[tuple[str, int]] = []
        self.squeue_fails = self.reservations_fail = self.associations_fail = self.config_fails = False
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> Completed:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv == SQUEUE_ARGV:
            return (
                Completed(1, "", "slurm_load_jobs error: timeout")
                if self.squeue_fails
                else Completed(0, self.listing, "")
            )
        if argv[:2] == ("scontrol", "update"):
            job = argv[2].removeprefix("JobId=")
            if job in self.gone:
                return Completed(1, "", f"Job has already finished for job {job}\n")
            if job in self.refused:
                return Completed(1, "", f"Access/permission denied for job {job}\n")
            self.updates.append((job, int(argv[3].removeprefix("TimeLimit="))))
            return Completed(0, "", "")
        if "reservation" in argv:
            if self.reservations_fail:
                return Completed(1, "", "slurm_load_reservations error: Socket timed out\n")
            return Completed(0, self.reservations, "")
        if "partition" in argv:
            return Completed(0, self.partitions, "")
        if argv == ("scontrol", "show", "config"):
            if self.config_fails:
                return Completed(1, "", "slurm_load_ctl_conf error: Unable to contact slurm controller\n")
            config = f"Configuration data as of {self.booted}\nAccountingStorageBackupHost = (null)\n"
            if self.enforce is not None:
                config += f"AccountingStorageEnforce = {self.enforce}\n"
            config += f"BOOT_TIME               = {self.booted}\nBurstBufferType         = (null)\n"
            return Completed(0, config, "")
        if argv[0] == "sinfo":
            return Completed(0, self.node_cores, "")
        if "assoc" in argv:
            if self.associations_fail:
                return Completed(
                    1, "", "sacctmgr: error: Problem talking to the database: Connection refused\n"
                )
            return Completed(0, self.associations, "")
        return Completed(0, self.qos, "")


def make_guard(
    slurm: FakeSlurm,
    tmp_path: Path,
    clock: Callable[[], float] = lambda: NOW,
    monotonic: Callable[[], float] | None = None,
    **over: object,
) -> tuple[Guard, CollectorRegistry]:
    """A guard on ``clock``, for its intervals too unless given a ``monotonic`` clock of their own."""
    registry = CollectorRegistry()
    files = {"heartbeat": tmp_path / "guard.heartbeat", "state": tmp_path / "guard" / "limits.json"}
    settings = GuardSettings(**{**files, **over})  # type: ignore[arg-type]
    guard = Guard(settings, slurm, GuardMetrics(registry), clock=clock, monotonic=monotonic or clock)
    return guard, registry


def polled(tmp_path: Path, *listings: Sequence[str]) -> tuple[FakeSlurm, Guard]:
    """A guard that polled once per listing (squeue's lines), in order."""
    slurm = FakeSlurm(listings[0])
    guard, _ = make_guard(slurm, tmp_path)
    for lines in listings:
        slurm.listing = "\n".join(lines) + "\n"
        guard.poll()
    return slurm, guard


def count(registry: CollectorRegistry, result: str) -> float:
    return registry.get_sample_value("harp_guard_extensions_total", {"result": result}) or 0.0


def test_squeue_lines_parse_and_bad_lines_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    text = "\n".join(
        [
            line("12", "10:00", "8:30", "harp:extend,t!=10,t0=600,v=x other|tool|text"),
            line("13_4", "1-00:00:00", "1:02:03", "(null)"),
            "garbage without fields",
            line("x14", "1:00", "0:10", "(null)"),
        ]
    )
    jobs = list(parse_running(text))
    assert [j.job_id for j in jobs] == ["12", "13_4"]
    assert jobs[0].limit_minutes == 10 and jobs[0].elapsed_s == 510 and jobs[0].own_limit_minutes == 600
    assert jobs[1].limit_minutes == 1440 and jobs[1].tag is None
    assert "skipped" in caplog.text


def test_hostlists_expand_like_scontrol() -> None:
    assert expand("c[1-3,5],gpu01") == {"c1", "c2", "c3", "c5", "gpu01"}
    assert expand("n[008-010]") == {"n008", "n009", "n010"}
    assert expand("(null)") == set()
    with pytest.raises(ValueError):
        expand("c[3-1]")


def test_due_jobs_are_extended_by_steps_and_others_left_alone(tmp_path: Path) -> None:
    slurm = FakeSlurm(
        [
            line("1", "10:00", "8:30", "harp:extend,t!=10,t0=600,v=x"),  # 90 s left: due
            line("2", "10:00", "1:00", "harp:extend,t!=10,t0=600,v=x"),  # 9 min left: not yet
            line("3", "10:00", "9:00", "harp:rewrite,t!=10,v=x"),  # rewrite: killed at its limit
            line("4", "10:00", "9:00", "harp:shadow,t=10,v=x"),
            line("5", "10:00", "9:00", "(null)"),
            line("6", "10:00", "9:30", "harp:time_min,t~=5,t0=60,v=x"),  # started at a cut limit
            line("7", "59:00", "58:00", "harp:extend,t!=10,t0=60,v=x"),  # last step: its request
        ]
    )
    guard, registry = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.listed == 7 and report.shortened == 4 and report.due == 3
    # 1: prediction 10 + 1 min leaves the lead; 6: time_min 5, 11.5 min needed -> 5 + 15.
    assert dict(slurm.updates) == {"1": 11, "6": 20, "7": 60}
    assert count(registry, results.EXTENDED) == 2 and count(registry, results.REACHED_REQUEST) == 1
    assert guard.heartbeat.alive()
    assert registry.get_sample_value("harp_guard_shortened_jobs") == 4


def test_a_reservation_on_the_job_s_node_refuses_and_is_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start = datetime.fromtimestamp(NOW + 60).isoformat(timespec="seconds")
    end = datetime.fromtimestamp(NOW + 3600).isoformat(timespec="seconds")
    reservations = f"ReservationName=maint StartTime={start} EndTime={end} Nodes=c[1-2] Flags=MAINT\n"
    slurm = FakeSlurm(
        [
            line("1", "10:00", "9:00", "harp:extend,t!=10,t0=600,v=x", nodes="c1"),
            line("2", "10:00", "9:00", "harp:extend,t!=10,t0=600,v=x", nodes="c3"),
        ],
        reservations=reservations,
    )
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert dict(slurm.updates) == {"2": 11}
    assert count(registry, results.REFUSED_BOUND) == 1
    assert "reservation maint" in caplog.text and "job 1" in caplog.text
    caplog.clear()
    guard.poll()  # refused once: not logged nor counted again at every poll
    assert count(registry, results.REFUSED_BOUND) == 1 and "job 1" not in caplog.text


def test_a_job_gone_and_a_rate_limit_do_not_stop_the_poll(tmp_path: Path) -> None:
    due = [line(str(i), "10:00", "9:00", "harp:extend,t!=10,t0=600,v=x") for i in range(1, 6)]
    slurm = FakeSlurm(due, gone=["1"])
    guard, registry = make_guard(slurm, tmp_path, max_updates_per_poll=3)
    report = guard.poll()
    assert report is not None and len(report.outcomes) == 3
    assert count(registry, results.GONE) == 1 and len(slurm.updates) == 2
    # The next poll sees the extended jobs' new limits (here: they left the listing) and takes the rest.
    done = {"1", *(job for job, _ in slurm.updates)}
    slurm.listing = "\n".join(d for d in due if d.split("|")[0] not in done) + "\n"
    guard.poll()
    assert sorted(job for job, _ in slurm.updates) == ["2", "3", "4", "5"]


def test_no_heartbeat_when_the_jobs_cannot_be_listed(tmp_path: Path) -> None:
    slurm = FakeSlurm([])
    slurm.squeue_fails = True
    guard, registry = make_guard(slurm, tmp_path)
    assert guard.poll() is None
    assert not guard.heartbeat.alive() and not guard.heartbeat.path.exists()
    assert registry.get_sample_value("harp_guard_polls_total", {"result": "failed"}) == 1


def test_no_heartbeat_when_no_line_of_the_listing_reads(tmp_path: Path) -> None:
    # squeue's output in a form the guard does not read (states spelled out after an upgrade, lines
    # cut short): a poll that listed nothing was good, and the daemon went on shortening new jobs.
    spelled = line("6", "40:00", "39:00", "harp:extend,t!=40,t0=600,v=x", state="RUNNING")
    for listing in ([spelled], ["6|R|0|2026-01-01T00:00:00|40:00"]):
        slurm = FakeSlurm(listing)
        guard, registry = make_guard(slurm, tmp_path)
        assert guard.poll() is None
        assert not guard.heartbeat.alive()
    assert registry.get_sample_value("harp_guard_polls_total", {"result": "failed"}) == 1
    for listing in ([], [line("7", "40:00", "0:00", "(null)", state="PD", nodes="")]):
        # no job at all, or only jobs the guard does not follow: a good poll
        slurm = FakeSlurm(listing)
        guard, _ = make_guard(slurm, tmp_path)
        assert guard.poll() is not None and guard.heartbeat.alive()


def test_bounds_from_scontrol_and_sacctmgr() -> None:
    text = (
        "ReservationName=r1 StartTime=2026-01-01T10:00:00 EndTime=2026-01-01T11:00:00 Nodes=c1 Flags=MAINT\n"
        "ReservationName=bad StartTime=never EndTime=2026-01-01T11:00:00 Nodes=c1\n"
    )
    r, bad = parse_reservations(text)
    assert r.name == "r1" and r.nodes == {"c1"} and r.end - r.start == 3600
    assert bad.name == "bad" and bad.unread_nodes and bad.end == math.inf  # bounds every job
    assert parse_partition_max("PartitionName=a MaxTime=1-00:00:00\nPartitionName=b MaxTime=UNLIMITED\n") == {
        "a": 1440
    }
    assert parse_qos("normal|\nlong|2-00:00:00\n").max_minutes == {"long": 2880}
    job = next(parse_running(line("1", "10:00", "9:00", "harp:extend,t!=10,t0=600,v=x")))
    bounds = Bounds(
        reservations=(Reservation("r", NOW + 600, NOW + 900, frozenset({"c1"})),),
        partition_max_minutes={"batch": 30},
    )
    assert bounds.limit_for(job, NOW) == (19, "reservation r")  # started 9 min ago; r in 10 min
    assert Bounds(partition_max_minutes={"batch": 30}).limit_for(job, NOW) == (30, "partition batch MaxTime")


def test_a_poll_whose_every_extension_failed_does_not_beat(tmp_path: Path) -> None:
    due = [line(str(i), "10:00", "9:00", "harp:extend,t!=10,t0=600,v=x") for i in (1, 2, 3)]
    slurm = FakeSlurm(due, refused=["1", "2", "3"])  # say the guard lost its operator rights
    guard, registry = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and not report.good and count(registry, results.FAILED) == 3
    assert not guard.heartbeat.path.exists()  # the daemon stops shortening new jobs
    assert registry.get_sample_value("harp_guard_polls_total", {"result": "failed"}) == 1
    assert registry.get_sample_value("harp_guard_last_success_timestamp_seconds") == 0
    assert registry.get_sample_value("harp_guard_poll_period_seconds") == guard.settings.poll_seconds
    guard.configure(dataclasses.replace(guard.settings, poll_seconds=300))  # as on SIGHUP
    assert registry.get_sample_value("harp_guard_poll_period_seconds") == 300
    # One extension that works is enough: a job-specific refusal must not stop the cuts.
    slurm.refused = {"1", "2"}
    report = guard.poll()
    assert report is not None and report.good and guard.heartbeat.alive()
    # Nothing due, nothing tried: a good poll.
    slurm.listing = line("4", "10:00", "1:00", "harp:extend,t!=10,t0=600,v=x") + "\n"
    assert guard.poll() == PollReport(1, 1, 0, ())


def test_guard_once_exits_1_when_every_extension_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "harp.toml"
    files = f'heartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n'
    config.write_text(f'[guard]\n{files}extension = "steps"\n')
    slurm = FakeSlurm([line("1", "10:00", "9:00", "harp:extend,t!=10,t0=600,v=x")], refused=["1"])
    monkeypatch.setattr(guard_command, "run_command", slurm)
    assert guard_command.run(argparse.Namespace(config=str(config), once=True)) == 1
    slurm.refused = set()
    assert guard_command.run(argparse.Namespace(config=str(config), once=True)) == 0
    assert slurm.updates == [("1", 11)]


def test_hostlists_with_a_suffix_or_several_groups_expand_within_a_cap() -> None:
    assert expand("n[1-2]-ib") == {"n1-ib", "n2-ib"}
    assert expand("rack[1-2]-n[01-02],x") == {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02", "x"}
    for bad in ("n[1-2", "n]1[", "n[1-2][a]"):
        with pytest.raises(ValueError, match="bad host"):
            expand(bad)
    # A product past MAX_NODES is refused before a name is made (10^12 here).
    with pytest.raises(ValueError, match="more than 1000000 names"):
        expand("a[1-999999]b[1-999999]")
