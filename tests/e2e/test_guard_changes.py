"""`harp guard` as a real process on a real cluster, on what changes while it runs or is down.

The jobs are tagged and their limits set by hand, as root (as the plugin would have, and as their
users would lower them); the guard polls every second, with a lead of LEAD_S:
(a) a reservation made on a running job's node after the guard's once-a-minute read of the bounds:
    the job falls due within that minute and is not extended into it;
(b) a pending job's limit lowered while the guard watches: it starts and is not extended past it;
(c) the same, with the guard stopped between the lowering and the start;
(d) a running job's limit lowered while the guard was stopped: the restarted guard knows, from its
    state file (written as the guard stopped), the higher limit it saw, and does not extend the job
    past the lowered one;
(e) a reservation in the hour that repeats in the guard's local time, its clocks gone back;
(f) jobs stopped (SIGSTOP), which squeue shows STOPPED alone: one falling due is extended, one whose
    user lowered it keeps that limit once it goes on;
(g) a job requeued and held (special exit), which squeue shows COMPLETING, then SPECIAL_EXIT alone:
    its limit lowered while it is held is never extended past once it runs again.
Each job would otherwise be extended by steps from its 1-minute prediction to 6 minutes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.test_guard import GuardProcess, wait_alive
from tests.e2e.zones import zone_falling_back_at

# Minutes of waiting on real jobs: scripts/test runs this module beside the others so marked.
pytestmark = pytest.mark.side_by_side

LEAD_S = 150
TIME_MIN = "harp:time_min,t~=1,t0=10,v=e2e"
EXTEND = "harp:extend,t!=1,t0=10,v=e2e"
SLEEP = "#!/bin/sh\nsleep 600\n"


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    return start_module_cluster(nodes=2, cpus_per_node=2)


def guard_process(tmp_path: Path, env: dict[str, str]) -> GuardProcess:
    """A guard polling every second, its files in ``tmp_path``; not started."""
    config = tmp_path / "guard.toml"
    config.write_text(
        f'[guard]\nheartbeat = "{tmp_path / "hb"}"\nstate = "{tmp_path / "limits.json"}"\n'
        f'poll_seconds = 1\nlead_seconds = {LEAD_S}\nstale_seconds = 5\nextension = "steps"\n'
    )
    return GuardProcess(config, env, tmp_path / "guard.log")


@contextmanager
def running_guard(cluster: SlurmCluster, tmp_path: Path) -> Iterator[GuardProcess]:
    """A guard on ``cluster``, its first poll done; stopped, and root's jobs cancelled, after."""
    process = guard_process(tmp_path, cluster.env)
    process.start()
    try:
        wait_alive(tmp_path / "hb")
        yield process
    finally:
        process.stop()
        cluster.run(["scancel", "--user=root"])


@pytest.fixture
def guard(cluster: SlurmCluster, tmp_path: Path) -> Iterator[GuardProcess]:
    """A running guard (its first poll done); the test's jobs are cancelled after the test."""
    with running_guard(cluster, tmp_path) as process:
        yield process


def update(cluster: SlurmCluster, job: int, *items: str) -> None:
    done = cluster.run(["scontrol", "update", f"JobId={job}", *items])
    assert done.returncode == 0, done.stderr


def submit(cluster: SlurmCluster, *args: str) -> int:
    result = cluster.sbatch(["-n1", "-t", "10", *args], SLEEP)
    assert result.job_id is not None, result.stderr
    return result.job_id


def squeue(cluster: SlurmCluster, job: int) -> tuple[str, str, str]:
    """(state, time limit, run time) as squeue prints them."""
    done = cluster.run(
        ["squeue", "--noheader", f"--jobs={job}", "--Format=State:0|,TimeLimit:0|,TimeUsed:0|"]
    )
    assert done.returncode == 0, done.stderr
    state, limit, used, _ = done.stdout.strip().split("|")
    return state, limit, used


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def followed(tmp_path: Path, job: int) -> list[Any] | None:
    """The guard's state file's entry of ``job``: [submitted, restarts, pending, highest, limit,
    run time, lowered_to], or None."""
    try:
        entry = json.loads((tmp_path / "limits.json").read_text())["jobs"].get(str(job))
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, list) else None


def polled(tmp_path: Path) -> None:
    """Wait for a poll the guard began after this call: the second heartbeat from now (its file
    holds the time of the beat, which ends a poll)."""
    beat_after(tmp_path, beat_after(tmp_path, time.time()))


def beat_after(tmp_path: Path, moment: float) -> float:
    """The time of the guard's first heartbeat after ``moment``, once there is one."""

    def beat() -> float:
        try:
            return float((tmp_path / "hb").read_text())
        except (OSError, ValueError):
            return 0.0

    wait_for("a poll of the guard", lambda: beat() > moment)
    return beat()


def log_of(tmp_path: Path) -> str:
    return (tmp_path / "guard.log").read_text()


def seconds(used: str) -> int:
    minutes, secs = used.split(":")[-2:]
    return int(minutes) * 60 + int(secs)


def test_a_reservation_made_after_the_guard_s_minute_read_bounds_the_extension(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    read_at = time.monotonic()  # the guard's first poll read every bound; the next is a minute away
    job = job_before_a_fresh_reservation(cluster)
    try:
        assert time.monotonic() - read_at < 25, "too slow to make the reservation within the guard's minute"
        wait_for("the job to fall due", lambda: seconds(squeue(cluster, job)[2]) >= 35)
        assert time.monotonic() - read_at < 55, "the guard's minute was over before the job fell due"
        assert_not_extended_into_fresh(cluster, job, tmp_path)
    finally:
        cluster.run(["scontrol", "delete", "ReservationName=fresh"])


def job_before_a_fresh_reservation(cluster: SlurmCluster) -> int:
    """A running job on c1, cut to 1 minute with a limit of 3 (due once 30 s have run: less than
    LEAD_S left), and a reservation ``fresh`` on c1 from 190 s on, which any extension runs into."""
    job = submit(cluster, "-w", "c1")
    wait_for("the job to run", lambda: squeue(cluster, job)[0] == "RUNNING")
    update(cluster, job, f"AdminComment={EXTEND}", "TimeLimit=3")
    made = cluster.run(
        ["scontrol", "create", "reservation", "ReservationName=fresh", "StartTime=now+190", "Duration=5",
         "Nodes=c1", "Users=root"]
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return job


def assert_not_extended_into_fresh(cluster: SlurmCluster, job: int, tmp_path: Path) -> None:
    time.sleep(2)  # two polls more
    assert squeue(cluster, job)[1] == "3:00", log_of(tmp_path)
    assert re.search(rf"job {job}: not extended past 3 min \(reservation fresh\)", log_of(tmp_path))


def test_a_reservation_in_the_hour_its_clocks_repeat_bounds_the_guard(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The guard's local clocks went back two minutes ago: scontrol, printing local time, showed the
    reservation in the hour shown once already, which read as local time ended an hour ago."""
    job = job_before_a_fresh_reservation(cluster)
    zone = zone_falling_back_at(int(time.time()) - 120)
    process = guard_process(tmp_path, cluster.env | {"TZ": zone})
    process.start()
    try:
        wait_alive(tmp_path / "hb")
        wait_for("the job to fall due", lambda: seconds(squeue(cluster, job)[2]) >= 35)
        assert_not_extended_into_fresh(cluster, job, tmp_path)
    finally:
        process.stop()
        cluster.run(["scontrol", "delete", "ReservationName=fresh"])
        cluster.run(["scancel", "--user=root"])


@pytest.mark.parametrize("restart", [False, True], ids=["watched", "guard-restarted"])
def test_a_limit_lowered_while_pending_is_never_extended_past(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path, restart: bool
) -> None:
    job = submit(cluster, "-w", "c2", "--hold")
    update(cluster, job, f"AdminComment={TIME_MIN}")  # time_min mode: the user's 10 minutes kept
    polled(tmp_path)  # the guard saw it pending
    if restart:
        guard.stop()
        assert followed(tmp_path, job) is not None  # written as the guard stopped
    update(cluster, job, "TimeLimit=2")  # its user lowers it
    if restart:
        guard.start()
    wait_for("the guard to see it lowered", lambda: (followed(tmp_path, job) or [None] * 7)[6] == 2)
    assert cluster.run(["scontrol", "release", str(job)]).returncode == 0
    wait_for("the job to run", lambda: squeue(cluster, job)[0] == "RUNNING")
    time.sleep(4)  # four polls, with less than the lead left of its 2 minutes
    assert squeue(cluster, job)[1] == "2:00", log_of(tmp_path)
    assert f"job {job}: limit lowered from 10 to 2 min while it was pending" in log_of(tmp_path)


def test_a_limit_lowered_while_no_guard_ran_is_known_from_its_state_file(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    job = submit(cluster, "-w", "c2")
    wait_for("the job to run", lambda: squeue(cluster, job)[0] == "RUNNING")
    update(cluster, job, f"AdminComment={EXTEND}")  # at its own 10 minutes already: not due
    polled(tmp_path)  # the guard saw it run
    guard.stop()
    assert (followed(tmp_path, job) or [None] * 7)[2] is False  # written, running, as the guard stopped
    update(cluster, job, "TimeLimit=2")  # its user lowers it while no guard runs
    guard.start()
    wait_for("the guard to see it lowered", lambda: (followed(tmp_path, job) or [None] * 7)[6] == 2)
    time.sleep(4)
    assert squeue(cluster, job)[1] == "2:00", log_of(tmp_path)
    assert f"job {job}: limit lowered from 10 to 2 min while it ran" in log_of(tmp_path)


def signal(cluster: SlurmCluster, job: int, name: str) -> None:
    done = cluster.run(["scancel", f"--signal={name}", str(job)])
    assert done.returncode == 0, done.stderr


def states(cluster: SlurmCluster, *jobs: int) -> set[str]:
    return {squeue(cluster, job)[0] for job in jobs}


def test_stopped_jobs_are_extended_and_keep_a_lowered_limit(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    due, lowered = submit(cluster, "-w", "c1"), submit(cluster, "-w", "c2")
    wait_for("the jobs to run", lambda: states(cluster, due, lowered) == {"RUNNING"})
    update(cluster, lowered, f"AdminComment={EXTEND}")  # at its own 10 minutes
    polled(tmp_path)
    update(cluster, lowered, "TimeLimit=2")  # its user lowers it
    update(cluster, due, f"AdminComment={EXTEND}", "TimeLimit=3")  # due once 30 s have run
    said = f"job {lowered}: limit lowered from 10 to 2 min while it ran"
    wait_for("the guard to see it lowered", lambda: said in log_of(tmp_path))
    for job in (due, lowered):
        signal(cluster, job, "STOP")
    wait_for("the jobs to stop", lambda: states(cluster, due, lowered) == {"STOPPED"})
    wait_for("the stopped job to be extended", lambda: squeue(cluster, due)[1] != "3:00")
    assert squeue(cluster, due)[:2] == ("STOPPED", "6:00"), log_of(tmp_path)
    signal(cluster, lowered, "CONT")
    wait_for("the job to go on", lambda: states(cluster, lowered) == {"RUNNING"})
    polled(tmp_path)
    time.sleep(2)  # two polls more, with less than the lead left of its 2 minutes
    assert squeue(cluster, lowered)[1] == "2:00", log_of(tmp_path)


def test_a_limit_lowered_while_held_after_a_requeue_is_never_extended_past(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    job = submit(cluster, "-w", "c2")
    wait_for("the job to run", lambda: states(cluster, job) == {"RUNNING"})
    update(cluster, job, f"AdminComment={TIME_MIN}")  # at its user's 10 minutes
    polled(tmp_path)
    assert cluster.run(["scontrol", "requeuehold", "State=SpecialExit", str(job)]).returncode == 0
    wait_for("the job to be held", lambda: states(cluster, job) == {"SPECIAL_EXIT"})
    polled(tmp_path)  # the guard saw it held at the 10 minutes it ran with
    update(cluster, job, "TimeLimit=2", "StartTime=now")  # its user lowers it (and it may start now)
    said = f"job {job}: limit lowered from 10 to 2 min while it was pending"
    wait_for("the guard to see it lowered", lambda: said in log_of(tmp_path))
    assert cluster.run(["scontrol", "release", str(job)]).returncode == 0
    wait_for("the job to run again", lambda: states(cluster, job) == {"RUNNING"})
    polled(tmp_path)
    time.sleep(2)
    assert squeue(cluster, job)[1] == "2:00", log_of(tmp_path)
