"""Reservations as `harp guard` bounds: the ones a job runs in, and core-based ones beside it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.bounds import Bounds, Reservation, parse_node_cores, parse_reservations
from slurm_harp.guard.running import parse_running
from slurm_harp.guard.slurm import run_command
from tests.unit.test_guard import NOW, FakeSlurm, count, line, make_guard

TAG = "harp:extend,t!=40,t0=600,v=x"
DAY = 86400.0


def at(t: float) -> str:
    """``t`` as scontrol prints it in the guard's runner: in UTC (guard.slurm)."""
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def reservation(name: str, start: float, end: float, nodes: str, extra: str = "") -> str:
    return f"ReservationName={name} StartTime={at(start)} EndTime={at(end)} Nodes={nodes} {extra}\n"


def job_in(reservations: str, nodes: str = "c1") -> str:
    return line("7", "40:00", "39:00", TAG, nodes=nodes).replace("|(null)|", f"|{reservations}|", 1)


def test_a_job_may_name_several_reservations(tmp_path: Path) -> None:
    # Submitted --reservation=R1,R2, it runs in R1 (on c1); Slurm keeps "R1,R2" as its reservation.
    r1 = reservation("R1", NOW - DAY, NOW + 7 * DAY, "c[1-4]")
    r2 = reservation("R2", NOW - DAY, NOW + 60, "c[5-8]")
    slurm = FakeSlurm([job_in("R1,R2")], reservations=r1 + r2)
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    # Not refused as if R1 were another's reservation, nor capped at the end of R2, elsewhere.
    assert slurm.updates == [("7", 41)] and count(registry, results.EXTENDED) == 1


def test_the_end_of_a_reservation_the_job_may_run_in_caps_it() -> None:
    (job,) = parse_running(job_in("R1,R2"))
    # Both on its node: it runs in one of them, which one squeue does not say; the earlier end caps.
    both = Bounds(
        reservations=(
            Reservation("R1", NOW - DAY, NOW + 7 * DAY, frozenset({"c1"})),
            Reservation("R2", NOW - DAY, NOW + 60, frozenset({"c1", "c2"})),
        )
    )
    assert both.limit_for(job, NOW) == (40, "end of its reservation R2")  # started 39 min ago
    # Its nodes unknown: every reservation it names caps it.
    (lost,) = parse_running(job_in("R1,R2", nodes="(null)"))
    elsewhere = Bounds(reservations=(Reservation("R2", NOW - DAY, NOW + 60, frozenset({"c5"})),))
    assert elsewhere.limit_for(lost, NOW)[1] == "end of its reservation R2"
    assert elsewhere.limit_for(job, NOW) == (None, "")


CORES = "CoreCnt=2 Flags=SPEC_NODES"  # 2 of c1's 8 cores


@pytest.mark.parametrize(
    ("start", "extra", "node_cores", "extended"),
    [
        (NOW - 3600, CORES, "c[1-8]|2|4\n", True),  # active: Slurm keeps its cores apart from the job
        (NOW + 30, CORES, "c[1-8]|2|4\n", False),  # starts in 30 s: its cores may be the job's
        (NOW - 3600, "CoreCnt=2 Flags=MAINT,SPEC_NODES", "c[1-8]|2|4\n", False),  # placed over jobs
        (NOW - 3600, "CoreCnt=2 Flags=IGNORE_JOBS", "c[1-8]|2|4\n", False),
        (NOW - 3600, "CoreCnt=8 Flags=SPEC_NODES", "c[1-8]|2|4\n", False),  # all of c1's cores
        (NOW - 3600, CORES, "c[2-8]|2|4\n", False),  # c1's cores unknown: taken as whole-node
        (NOW - 3600, CORES, "garbage\n", False),
    ],
)
def test_a_core_based_reservation_beside_a_job(
    tmp_path: Path, start: float, extra: str, node_cores: str, extended: bool
) -> None:
    text = reservation("cores", start, NOW + 30 * DAY, "c1", extra)
    slurm = FakeSlurm([job_in("(null)")], reservations=text, node_cores=node_cores)
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == ([("7", 41)] if extended else [])
    assert count(registry, results.REFUSED_BOUND) == (0 if extended else 1)


def test_a_core_based_reservation_yet_to_start_caps_at_its_start() -> None:
    (job,) = parse_running(job_in("(null)"))
    cores = Reservation("cores", NOW + 600, NOW + DAY, frozenset({"c1"}), cores=2)
    bounds = Bounds(reservations=(cores,), node_cores={"c1": 8})
    assert bounds.limit_for(job, NOW) == (49, "reservation cores")


def test_reservation_cores_and_flags_and_node_cores_parse() -> None:
    (r,) = parse_reservations(reservation("m", NOW, NOW + 60, "c[1-2]", "CoreCnt=4 Flags=MAINT,SPEC_NODES"))
    assert r.cores == 4 and r.flags == {"MAINT", "SPEC_NODES"}
    (r,) = parse_reservations(reservation("n", NOW, NOW + 60, "c1", "Flags=(null)"))
    assert r.cores == 0 and r.flags == frozenset()
    # sinfo prints one line per kind of node (and per partition): sockets x cores per socket.
    cores = parse_node_cores("c[1-2]|2|4\ngpu01|1|16\nc[1-2]|2|4\nbad line\n")
    assert cores == {"c1": 8, "c2": 8, "gpu01": 16}


def reservation_reads(slurm: FakeSlurm) -> int:
    return sum("reservation" in argv for argv in slurm.calls)


def test_a_reservation_made_within_the_minute_bounds_the_next_extension(tmp_path: Path) -> None:
    # The guard read the bounds at its first poll (nothing due, no reservation); seconds later, an
    # admin makes one on the job's node from right after its limit, and the job falls due.
    slurm = FakeSlurm([line("7", "40:00", "30:00", TAG)])
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [] and reservation_reads(slurm) == 1
    guard.poll()  # nothing due: the partitions' and reservations' minute is not over, nothing re-read
    assert reservation_reads(slurm) == 1
    slurm.reservations = reservation("maint", NOW + 90, NOW + DAY, "c1", "Flags=MAINT")
    slurm.listing = line("7", "40:00", "39:00", TAG) + "\n"
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1
    assert reservation_reads(slurm) == 2


def test_no_extension_while_the_reservations_cannot_be_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    slurm = FakeSlurm([line("7", "40:00", "30:00", TAG)])
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    slurm.reservations_fail = True
    slurm.listing = line("7", "40:00", "39:00", TAG) + "\n"
    report = guard.poll()
    # Not extended on a view of the reservations a minute old; failed, so no heartbeat is refreshed
    # by this poll (a guard that can never read them stops the daemon's cuts).
    assert report is not None and not report.good and slurm.updates == []
    assert count(registry, results.FAILED) == 1 and "reservations unreadable" in caplog.text
    slurm.reservations_fail = False
    report = guard.poll()
    assert report is not None and report.good and slurm.updates == [("7", 41)]


def test_scontrol_runs_in_utc_and_reservation_times_are_read_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_zone: Callable[[str], None]
) -> None:
    """In local time, a reservation starting in the hour that repeats when clocks go back was read
    an hour early: past already, it bounded nothing. The guard's tools run in UTC."""
    local_zone("Europe/Berlin")  # 2024-10-27 02:00-03:00 happened twice
    tool = tmp_path / "scontrol"
    tool.write_text("")
    tool.chmod(0o755)
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/other.conf")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "%d.%m.%Y-%H:%M")  # a site's own: its times would not read
    tool.write_text('#!/bin/sh\necho "$TZ|$SLURM_CONF|$SLURM_TIME_FORMAT|$(date -d @0 +%H:%M)"\n')
    assert run_command([str(tool)]).stdout == "UTC0|/etc/slurm/other.conf|standard|00:00\n"
    start = datetime(2024, 10, 27, 0, 30, tzinfo=UTC).timestamp()  # 02:30 CEST, the first 02:30 there
    later = start + 3600  # 02:30 CET, the second
    (r,) = parse_reservations(reservation("maint", later, later + 600, "c1"))
    assert (r.start, r.end) == (later, later + 600)


def test_a_maintenance_reservation_on_nodes_with_a_suffix_bounds_the_job(tmp_path: Path) -> None:
    # Before, "n[1-2]-ib" did not expand: the job's node set was empty and the reservation on its
    # node did not bound it. Slurm's host lists allow text after the brackets and several groups.
    maint = reservation("M", NOW + 60, NOW + DAY, "rack[1-2]-n[01-02]-ib", "Flags=MAINT")
    slurm = FakeSlurm([line("7", "40:00", "39:00", TAG, nodes="rack2-n[01-02]-ib")], reservations=maint)
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1


@pytest.mark.parametrize("unreadable", ["job", "reservation"])
def test_a_node_list_that_does_not_read_bounds_on_the_safe_side(
    tmp_path: Path, unreadable: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Which nodes the job or the reservation holds is unknown: the reservation bounds the job, as the
    # guard must not extend a job into a maintenance reservation (the job may be stopped at its cut).
    nodes = {"job": ("c[1-2", "c[5-8]"), "reservation": ("c1", "c[5-8")}[unreadable]
    maint = reservation("M", NOW + 60, NOW + DAY, nodes[1], "Flags=MAINT")
    slurm = FakeSlurm([line("7", "40:00", "39:00", TAG, nodes=nodes[0])], reservations=maint)
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1
    assert "node list unreadable" in caplog.text


@pytest.mark.parametrize("own", [False, True])
def test_a_reservation_whose_times_do_not_read_bounds_every_job(
    tmp_path: Path, own: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Skipped before, its window unknown: a job was extended into a maintenance reservation whose
    # times came in a form the guard does not read (a site's SLURM_TIME_FORMAT, say).
    odd = "ReservationName=M StartTime=05.12.2026-10:00 EndTime=06.12.2026-10:00 Nodes=c9 Flags=MAINT\n"
    job = job_in("M") if own else line("7", "40:00", "39:00", TAG)
    slurm = FakeSlurm([job], reservations=odd)
    guard, registry = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1
    assert "reservation 'M' does not read" in caplog.text


def test_a_job_refused_at_a_reservation_deleted_since_is_extended_at_the_next_poll(tmp_path: Path) -> None:
    # The shortest lead the configuration allows beside a long poll: a job refused 29 s before its
    # limit at a maintenance reservation, which the admin deletes a second later. The refused job
    # was looked at again only at the once-a-minute read, by then past its limit.
    clock = [NOW]
    maint = reservation("maint", NOW + 60, NOW + DAY, "c1", "Flags=MAINT")
    slurm = FakeSlurm([line("7", "10:00", "9:31", TAG)], reservations=maint)
    guard, registry = make_guard(slurm, tmp_path, clock=lambda: clock[0], lead_seconds=30, poll_seconds=15)
    guard.poll()
    assert slurm.updates == [] and count(registry, results.REFUSED_BOUND) == 1
    slurm.reservations = ""  # deleted
    clock[0] += 15
    slurm.listing = line("7", "10:00", "9:46", TAG) + "\n"
    guard.poll()  # 14 s left
    assert [job for job, _ in slurm.updates] == ["7"]
    # Still refused, it is not logged nor counted again at every poll.
    slurm.reservations = maint
    slurm.listing = line("8", "10:00", "9:31", TAG, nodes="c1") + "\n"
    for _ in range(3):
        clock[0] += 15
        guard.poll()
    assert count(registry, results.REFUSED_BOUND) == 2
