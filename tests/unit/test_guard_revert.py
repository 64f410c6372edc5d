"""A slurmctld that restarts, or whose backup takes over, from job state saved before the guard's
extension (guard.slurmctld_start): the job's limit is back at the one before the raise. That is no
lowering by its user, and the job is extended again; a lowering listed by the slurmctld seen
holding the raise still is one."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_harp.guard import seen_file
from slurm_harp.guard.loop import Guard
from slurm_harp.guard.running import SQUEUE_ARGV
from slurm_harp.guard.slurm import Completed
from slurm_harp.guard.slurmctld_start import REREAD_S
from tests.unit.test_guard import BOOTED, NOW, SUBMITTED, FakeSlurm, line, make_guard
from tests.unit.test_guard_seen_file import Clock

EXTEND = "harp:extend,t!=40,t0=600,v=x"  # cut to 40 min, its user asked 600
RESTARTED = "2027-01-15T08:00:03"  # after the listing (NOW) that showed the raise
BACKUP = "2027-01-10T00:00:00"  # a standby backup, started days before, taking over
CONFIG = ("scontrol", "show", "config")


def raised(tmp_path: Path) -> tuple[FakeSlurm, Guard]:
    """Job 7 extended 40 -> 41 min by a guard, which then listed the raise."""
    slurm = FakeSlurm([line("7", "40:00", "38:10", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    assert slurm.updates == [("7", 41)]
    listed(slurm, guard, "41:00", "38:15")
    return slurm, guard


class Failover(FakeSlurm):
    """A FakeSlurm whose slurmctld gives way, right after the next listing, to one started at
    ``then``."""

    then: str | None = None

    def __call__(self, argv: Sequence[str]) -> Completed:
        done = super().__call__(argv)
        if tuple(argv) == SQUEUE_ARGV and self.then is not None:
            self.booted, self.then = self.then, None
        return done


def listed(slurm: FakeSlurm, guard: Guard, limit: str, used: str) -> None:
    """A poll listing job 7 at ``limit`` after ``used``."""
    slurm.listing = line("7", limit, used, EXTEND) + "\n"
    guard.poll()


def extended(tmp_path: Path) -> FakeSlurm:
    """raised(), the guard then stopped (its state file written)."""
    slurm, guard = raised(tmp_path)
    guard.close()
    return slurm


def entry(tmp_path: Path) -> list[object]:
    """Job 7's entry in the state file: [submitted, restarts, pending, highest, limit, run time,
    lowered_to]."""
    jobs: dict[str, list[object]] = json.loads((tmp_path / "guard" / "limits.json").read_text())["jobs"]
    return jobs["7"]


@pytest.mark.parametrize("booted", [RESTARTED, BACKUP], ids=["restarted", "backup-took-over"])
def test_an_extension_undone_by_slurmctld_is_extended_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, booted: str
) -> None:
    # The audit's case: before, the drop from 41 back to 40 was read as its user's lowering, never
    # extended again (by this guard or a restarted one): Slurm stopped the job at 40 min of 600.
    slurm, guard = raised(tmp_path)
    slurm.booted = booted  # slurmctld restarts from state saved before the update, or its backup
    slurm.listing = line("7", "40:00", "39:00", EXTEND) + "\n"
    report = guard.poll()
    assert report is not None and report.shortened == 1
    assert slurm.updates[0] == ("7", 41) and len(slurm.updates) == 2 and 40 < slurm.updates[1][1] <= 600
    assert "taken for its state from before the raise" in caplog.text
    assert "limit lowered" not in caplog.text
    guard.close()
    assert entry(tmp_path)[3:5] == [40, 40] and entry(tmp_path)[6] is None  # highest 40, no lowering


def test_a_lowering_listed_by_the_slurmctld_that_held_the_raise_is_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    slurm, guard = raised(tmp_path)
    listed(slurm, guard, "40:00", "39:00")  # its user: TimeLimit=40
    assert slurm.updates == [("7", 41)]
    assert "job 7: limit lowered from 41 to 40 min while it ran" in caplog.text


@pytest.mark.parametrize("booted", [BOOTED, RESTARTED], ids=["same-slurmctld", "restarted"])
def test_a_restarted_guard_knows_which_slurmctld_held_the_raise(tmp_path: Path, booted: str) -> None:
    # The guard stops after the raise; while it is down, slurmctld restarts from state saved
    # before it (extended again), or it does not and its user lowers the job (honoured).
    slurm = extended(tmp_path)
    assert json.loads((tmp_path / "guard" / "limits.json").read_text())["raise_held_by"] == {"7": NOW - 3600}
    slurm.booted = booted
    slurm.listing = line("7", "40:00", "39:00", EXTEND) + "\n"
    make_guard(slurm, tmp_path)[0].poll()
    assert len(slurm.updates) == (2 if booted == RESTARTED else 1)


def test_a_revert_is_undone_once_and_a_later_lowering_is_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # After the revert, the guard extends the job again; the restarted slurmctld lists that raise,
    # and a lowering it lists afterwards is its user's.
    caplog.set_level(logging.INFO)
    slurm = extended(tmp_path)
    slurm.booted = RESTARTED
    clock = Clock()
    clock.now = NOW + 10  # the restarted slurmctld answers from here on
    guard, _ = make_guard(slurm, tmp_path, clock=clock)
    listed(slurm, guard, "40:00", "38:30")
    [*_, (_, again)] = slurm.updates
    assert len(slurm.updates) == 2
    listed(slurm, guard, f"{again}:00", "38:35")
    listed(slurm, guard, "40:00", "38:40")  # its user: TimeLimit=40
    assert len(slurm.updates) == 2
    assert f"job 7: limit lowered from {again} to 40 min while it ran" in caplog.text


def test_slurmctld_s_start_that_does_not_read_is_taken_for_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Taken for a lowering, a restart's limit stops the job at harp's cut; taken for a restart, a
    # lowering is extended past, never past the user's own request (docs/guard.md).
    slurm, guard = raised(tmp_path)
    slurm.booted = "Unknown"
    listed(slurm, guard, "40:00", "39:00")
    assert len(slurm.updates) == 2
    assert "slurmctld's start does not read (BOOT_TIME 'Unknown')" in caplog.text


@pytest.mark.parametrize("then", [BACKUP, RESTARTED], ids=["backup-took-over", "restarted"])
def test_a_raise_is_placed_only_when_the_same_slurmctld_answers_before_and_after_the_listing(
    tmp_path: Path, then: str
) -> None:
    # The primary lists the raise, unsaved, and dies; the read of the start after the listing is
    # answered by the slurmctld that took over. Before, a standby backup started days before was taken
    # to hold the raise, and its listing of the limit from before it read as a lowering: Slurm
    # stopped the job at 40 min of 600.
    slurm = Failover([line("7", "40:00", "38:10", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    slurm.then = then  # after the next listing
    listed(slurm, guard, "41:00", "38:15")
    assert guard._lowered.seen["7"].raise_held_by is None
    listed(slurm, guard, "40:00", "39:00")
    assert len(slurm.updates) == 2


def test_a_further_lowering_after_a_clean_restart_is_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Lowered to the limit before the raise, then, after a clean restart of slurmctld, lower still:
    # a drop from a limit already at or below the one before the raise undoes no raise. Before, it
    # was taken for a restart's and the job extended again, past its user's latest limit.
    caplog.set_level(logging.INFO)
    clock = Clock()
    slurm = FakeSlurm([line("7", "40:00", "38:10", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path, clock=clock)
    guard.poll()
    listed(slurm, guard, "41:00", "38:15")
    listed(slurm, guard, "40:00", "38:20")  # its user: TimeLimit=40
    slurm.booted, clock.now = RESTARTED, NOW + 3600
    listed(slurm, guard, "40:00", "38:30")
    listed(slurm, guard, "39:00", "38:35")  # its user again: TimeLimit=39
    assert slurm.updates == [("7", 41)]
    assert "job 7: limit lowered from 41 to 39 min while it ran" in caplog.text
    assert "taken for its state" not in caplog.text


def test_slurmctld_s_start_is_read_at_most_twice_a_poll_and_only_when_needed(tmp_path: Path) -> None:
    # Two jobs raised in one poll, placed by one read before the listing and one after; none while
    # nothing is to place, until a minute passed: then the slurmctld answering is known to hold the
    # raises, after a clean restart too. A drop costs one read after the listing. (The bounds' read,
    # once a minute, needs it too, for AccountingStorageEnforce: the read after the listing, shared,
    # one more at the first poll only.)
    jobs = [line(job, "40:00", "38:10", EXTEND) for job in ("7", "8")]
    slurm = FakeSlurm(jobs)
    clock = Clock()
    guard, _ = make_guard(slurm, tmp_path, clock=clock)
    guard.poll()
    assert slurm.calls.count(CONFIG) == 1
    slurm.listing = "\n".join(line(job, "41:00", "38:15", EXTEND) for job in ("7", "8")) + "\n"
    guard.poll()
    assert slurm.calls.count(CONFIG) == 3
    guard.poll()
    assert slurm.calls.count(CONFIG) == 3
    slurm.booted = RESTARTED  # a clean restart: the raises saved, listed again
    clock.now = NOW + REREAD_S
    guard.poll()
    assert slurm.calls.count(CONFIG) == 5
    assert {s.raise_held_by for s in guard._lowered.seen.values()} == {int(NOW) + 3}
    slurm.listing = line("7", "40:00", "39:00", EXTEND) + "\n" + line("8", "41:00", "38:30", EXTEND)
    guard.poll()  # 7's user lowers it, listed by the slurmctld that now holds the raise
    assert slurm.calls.count(CONFIG) == 6 and slurm.updates == [("7", 41), ("8", 41)]


def test_an_older_state_file_places_the_raise_at_the_next_poll(tmp_path: Path) -> None:
    # A file of the guard before this one: the raise, and no slurmctld seen holding it. The next
    # poll lists the raise and places it; a drop listed by the same slurmctld is then a lowering.
    state = tmp_path / "guard" / "limits.json"
    state.parent.mkdir()
    run = [SUBMITTED, 0, False, 41, 41, 2295.0, None]
    state.write_text(json.dumps({"format": seen_file.FORMAT, "jobs": {"7": run}, "raised_from": {"7": 40}}))
    slurm = FakeSlurm([line("7", "41:00", "38:20", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    listed(slurm, guard, "40:00", "39:00")
    assert slurm.updates == []


def test_a_restart_that_lost_the_later_of_two_guards_raises_is_no_lowering(tmp_path: Path) -> None:
    # Two guards extend job 7 from 40 min, one to 50, the other to 60, landing last. slurmctld dies
    # within 5 s of the 60, its backup takes over from state holding the 50, and lists it more than
    # 5 minutes on (no late landing). Before, 60 -> 50, above the 40 before the raise, was read as
    # its user's lowering, and Slurm stopped the job at 50 min of its user's 600.
    clock = Clock()
    slurm = FakeSlurm([line("7", "40:00", "37:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path, clock=clock)
    guard.poll()
    listed(slurm, guard, "1:00:00", "38:15")
    slurm.booted = BACKUP
    listed(slurm, guard, "50:00", "46:00")
    assert guard._lowered.seen["7"].lowered_to is None and slurm.updates == []
    clock.now += 5
    listed(slurm, guard, "50:00", "48:30")
    assert slurm.updates and 50 < slurm.updates[-1][1] <= 600


def test_a_raise_held_by_that_does_not_read_is_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "limits.json"
    run = [SUBMITTED, 0, False, 64, 64, 2295.0, None]
    jobs = {str(job): run for job in range(1, 6)}
    raised_from = {job: 40 for job in ("1", "2", "3", "4")}
    held = {"1": int(NOW), "2": -1, "3": True, "4": "2027-01-15", "5": int(NOW)}  # 5: no raise
    body = {"format": seen_file.FORMAT, "jobs": jobs, "raised_from": raised_from, "raise_held_by": held}
    state.write_text(json.dumps(body))
    seen = seen_file.load(state)
    assert {job: s.raise_held_by for job, s in seen.items()} == {"1": int(NOW), **dict.fromkeys("2345")}
    assert "4 raise_held_by values that do not read ignored, their entries kept" in caplog.text
    state.write_text(json.dumps(body | {"raise_held_by": [int(NOW)]}))
    assert seen_file.load(state) == {}


@pytest.mark.parametrize(
    ("raised_from", "held"),
    [(40, float(NOW - 3600)), ("x", int(NOW)), (40.0, None), (41, None)],
    ids=["held-float", "from-text", "from-float", "from-not-below-highest"],
)
def test_a_lowering_outlives_its_raise_that_does_not_read(
    tmp_path: Path, raised_from: object, held: object
) -> None:
    # A JSON tool wrote the BOOT_TIME, or the limit before the raise, as a float. Before, the whole
    # entry was dropped, its user's lowering (41 -> 40) with it, and the guard extended the job past it.
    state = tmp_path / "guard" / "limits.json"
    state.parent.mkdir()
    lowered = [SUBMITTED, 0, False, 41, 40, 2300.0, 40]
    body = {"format": seen_file.FORMAT, "jobs": {"7": lowered}, "raised_from": {"7": raised_from}}
    state.write_text(json.dumps(body | ({} if held is None else {"raise_held_by": {"7": held}})))
    slurm = FakeSlurm([line("7", "40:00", "38:40", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    listed(slurm, guard, "40:00", "39:50")
    assert slurm.updates == []


def test_a_lowering_is_judged_once_as_it_is_listed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Listed at the lowered limit poll after poll, the job costs no read of slurmctld's start, and
    # a clean restart later (a new start, once read) does not turn the lowering into a revert.
    clock = Clock()
    slurm = FakeSlurm([line("7", "40:00", "30:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path, clock=clock)
    guard.poll()
    listed(slurm, guard, "64:00", "30:05")  # an admin's raise
    listed(slurm, guard, "64:00", "30:07")  # placed: not the guard's, it was not foreseen at the last
    listed(slurm, guard, "40:00", "30:10")  # its user's lowering
    reads = slurm.calls.count(CONFIG)
    listed(slurm, guard, "40:00", "30:15")
    assert slurm.calls.count(CONFIG) == reads
    slurm.booted, clock.now = RESTARTED, NOW + REREAD_S
    listed(slurm, guard, "40:00", "39:00")
    assert slurm.updates == [] and "taken for its state" not in caplog.text
