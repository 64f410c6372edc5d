"""The jobs `harp guard` reads from squeue: array tasks and heterogeneous components addressed alone,
and odd lines that never stop a poll (Slurm faked at the subprocess boundary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.guard import running
from slurm_harp.guard.bounds import parse_partition_max, parse_qos, parse_reservations
from slurm_harp.guard.running import SQUEUE_ARGV, parse_running
from tests.unit.test_guard import FakeSlurm, line, make_guard
from tests.unit.test_guard_lowered import pending

TAG = "harp:extend,t!=40,t0=600,v=x"


def test_squeue_is_asked_for_the_id_that_addresses_one_job() -> None:
    # JobID prints the raw id, which scontrol update takes for a whole array or heterogeneous job.
    assert SQUEUE_ARGV[-1].startswith("--Format=JobArrayID:0|,")


def test_an_array_task_and_a_het_component_are_extended_alone(tmp_path: Path) -> None:
    slurm = FakeSlurm(
        [
            line("1000_2", "40:00", "39:00", TAG),  # the array's own record (raw id 1000) runs task 2
            line("1000_0", "1:40:00", "1:35:00", TAG, nodes="c2"),  # extended further already
            line("7+0", "40:00", "39:00", TAG),  # a heterogeneous job's leader
            line("7+1", "1:40:00", "1:35:00", TAG),
        ]
    )
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.due == 2
    assert slurm.updates == [("1000_2", 41), ("7+0", 41)]


@pytest.mark.parametrize("job_id", ["1000_[3-5]", "7+", "+1", "12_3+1", "1_2_3", " ", "١٢"])
def test_an_id_that_is_not_one_job_is_skipped(job_id: str, caplog: pytest.LogCaptureFixture) -> None:
    assert list(parse_running(line(job_id, "40:00", "39:00", TAG))) == []
    assert "skipped" in caplog.text


def test_an_overflowing_line_never_stops_a_poll(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    big = "9" * 400  # the audit's input: it once raised OverflowError from float()
    slurm = FakeSlurm(
        [
            line("1", "40:00", "39:00", TAG),
            line("2", f"{big}:00", "1:00", ""),
            line("3", "40:00", f"{big}:00:00", TAG),
            line("4", f"{'9' * 306}:00:00", "1:00", TAG),  # a finite number of hours, infinite seconds
        ]
    )
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.listed == 1 and slurm.updates == [("1", 41)]
    assert guard.heartbeat.alive()
    assert caplog.text.count("skipped") == 3 and caplog.text.count("number out of range") == 3


def test_a_tag_with_a_number_past_2_53_is_no_tag_to_the_guard(tmp_path: Path) -> None:
    """The guard reads tags through core.tag.parse_tag: a prediction of 400 digits is a
    malformed tag, and the job is left as an untagged one is (before, the tag read, and the job was
    extended at once to its user's own 600 minutes)."""
    big = "9" * 400
    slurm = FakeSlurm(
        [line("1", "40:00", "39:00", f"harp:extend,t!={big},t0=600,v=x"), line("2", "40:00", "39:00", TAG)]
    )
    (first, _) = parse_running(slurm.listing)
    assert first.tag is None
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and slurm.updates == [("2", 41)]


def test_a_line_that_raises_anything_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    def tag_of(comment: str | None) -> None:
        if comment == "odd":
            raise RuntimeError("a parser bug")

    monkeypatch.setattr(running, "parse_tag", tag_of)
    jobs = parse_running("\n".join([line("1", "40:00", "1:00", "odd"), line("2", "40:00", "1:00", "")]))
    assert [j.job_id for j in jobs] == ["2"]


def test_overflowing_site_bounds_are_skipped() -> None:
    big = "9" * 400
    assert parse_partition_max(
        f"PartitionName=p MaxTime={big}-00:00:00\nPartitionName=q MaxTime={'9' * 306}:00:00\n"
        "PartitionName=batch MaxTime=1-00:00:00\n"
    ) == {"batch": 1440}
    assert parse_qos(f"huge|{big}-00:00:00\nlong|2-00:00:00\n").max_minutes == {"long": 2880}
    hour = "StartTime=2026-01-01T10:00:00 EndTime=2026-01-01T11:00:00 Nodes=c1"
    reservations = parse_reservations(
        f"ReservationName=odd {hour} CoreCnt=x\nReservationName=ok {hour} CoreCnt={big}\n"
    )
    assert [(r.name, r.unread_nodes) for r in reservations] == [("odd", True), ("ok", False)]


def test_jobs_not_running_are_read_only_when_tagged_for_the_guard(caplog: pytest.LogCaptureFixture) -> None:
    other = "harp:shadow,t=40,v=x"
    text = "\n".join(
        [
            line("1", "40:00", "0:00", TAG, state="PD", nodes=""),
            line("2_[3-5%2]", "NOT_SET", "0:00", TAG, state="PD", nodes=""),  # an array's own record
            line("3", "40:00", "0:00", other, state="PD", nodes=""),  # annotated only: not followed
            line("4", "garbage", "0:00", "(null)", state="PD", nodes=""),  # untagged: never parsed
            line("5", "40:00", "10:00", TAG, state="S", restarts=2),
            line("6", "40:00", "0:00", TAG, state="CF"),
            line("7_[1-2]", "40:00", "1:00", TAG),  # running: not one job
            line("8", "40:00", "1:00", TAG, state="CG"),
            line("9", "40:00", "1:00", TAG, state="r?"),  # not a state squeue prints
        ]
    )
    jobs = {j.job_id: j for j in parse_running(text)}
    assert list(jobs) == ["1", "2_[3-5%2]", "5", "6", "8"]
    assert jobs["2_[3-5%2]"].limit_minutes is None and jobs["5"].restarts == 2 and jobs["5"].state == "S"
    assert caplog.text.count("skipped") == 2 and "line 4" not in caplog.text


def test_squeue_lists_the_jobs_whose_state_carries_a_flag() -> None:
    # A job with a state flag matches --states=RUNNING (or PENDING) no more (22.05 squeue _filter_job):
    # only its flag's name lists it.
    states = next(a for a in SQUEUE_ARGV if a.startswith("--states=")).removeprefix("--states=")
    flags = {"STOPPED", "SIGNALING", "RESIZING", "SPECIAL_EXIT", "REQUEUE_HOLD", "RESV_DEL_HOLD"}
    assert flags | {"COMPLETING", "CONFIGURING", "RUNNING", "PENDING", "SUSPENDED"} == set(states.split(","))


@pytest.mark.parametrize(
    ("shown", "state"),
    [
        ("ST", running.RUNNING),  # stopped (SIGSTOP): its time runs on
        ("SI", running.RUNNING),  # a SIGSTOP or SIGCONT on its way
        ("RS", running.RUNNING),
        ("SE", running.PENDING),  # requeued and held in special exit
        ("RH", running.PENDING),  # held after too many requeues
        ("RD", running.PENDING),  # held: its reservation was deleted
        ("CG", running.COMPLETING),
        ("CF", running.UNSETTLED),
        ("RF", running.UNSETTLED),  # a federation's requeue: not placed here
    ],
)
def test_a_job_shown_by_a_flag_is_read_in_the_state_it_goes_with(shown: str, state: str) -> None:
    # squeue shows a job whose state carries flags by one flag alone (22.05 job_state_string_compact).
    assert [j.state for j in parse_running(line("5", "40:00", "10:00", TAG, state=shown))] == [state]


def test_a_stopped_job_is_extended(tmp_path: Path) -> None:
    slurm = FakeSlurm([line("6", "40:00", "39:00", TAG, state="ST")])
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.listed == 1 and slurm.updates == [("6", 41)]


def test_a_limit_over_a_year_reads_and_never_fails_the_poll(tmp_path: Path) -> None:
    # The audit's case: squeue prints a duration over a year as INVALID (22.05 _print_secs). A user's
    # own --time=400-0, tagged in time_min mode, was a line that did not read: on a cluster listing
    # nothing else, the poll failed, no heartbeat, and the daemon stopped shortening every new job.
    tag = "harp:time_min,t~=60,t0=576000,v=x"
    slurm = FakeSlurm([pending("5", "INVALID", tag)])
    guard, _ = make_guard(slurm, tmp_path)
    assert guard.poll() is not None and guard.heartbeat.alive()
    # Read as over a year, at least: not a lowering from the 400 days harp gave it
    seen = guard._lowered.seen["5"]
    assert (seen.limit, seen.lowered_to) == (running.OVER_A_YEAR, None)
    # Started cut to 100 min (backfill), extended to its 400 days (INVALID again), then lowered by its
    # user to 10000 min: over a year was the highest, so 10000 is a lowering, never extended past.
    for limit, used in (("1:40:00", "1:39:00"), ("INVALID", "2:00:00"), ("6-22:40:00", "6-22:39:00")):
        slurm.listing = line("5", limit, used, tag) + "\n"
        guard.poll()
    assert slurm.updates == [("5", 120)]  # once, as it started: 60 + 1 h


def test_a_job_whose_limit_is_over_a_year_is_not_extended(tmp_path: Path) -> None:
    # Its true limit is unknown: a minute before the least it may be, an extension could cut it.
    tag = "harp:time_min,t~=60,t0=600000,v=x"
    slurm = FakeSlurm([line("5", "INVALID", "364-23:59:00", tag)])
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.listed == 1 and report.shortened == 0 and slurm.updates == []


def test_a_run_time_printed_invalid_skips_its_line_but_never_fails_the_poll(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A job run over a year (no limit), or one started ahead of this host's clock after it stepped
    # back: squeue prints INVALID. Its line is skipped, and what was seen of its job kept.
    caplog.set_level("INFO")
    slurm = FakeSlurm([line("5", "UNLIMITED", "INVALID", "(null)")])
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.listed == 0 and guard.heartbeat.alive()
    assert "squeue line 1 skipped: job 5: run time INVALID" in caplog.text
    unread: set[str] = set()
    assert list(parse_running(line("6", "40:00", "INVALID", TAG), unread)) == [] and unread == {"6"}
