"""What `harp guard` saw of its jobs' limits, kept for the next guard (guard.seen_file)."""

from __future__ import annotations

import gc
import json
import logging
from pathlib import Path

import pytest

from slurm_harp.guard import seen_file
from slurm_harp.guard.lowered_limits import MISSING_POLLS
from tests.conftest import not_a_file, raised_within
from tests.unit.test_guard import NOW, SUBMITTED, FakeSlurm, line, make_guard, polled
from tests.unit.test_guard_lowered import pending

EXTEND = "harp:extend,t!=40,t0=600,v=x"
TIME_MIN = "harp:time_min,t~=40,t0=600,v=x"


def state_of(tmp_path: Path) -> Path:
    return tmp_path / "guard" / "limits.json"  # make_guard's


def write_state(tmp_path: Path, body: object) -> None:
    state_of(tmp_path).parent.mkdir(exist_ok=True)
    state_of(tmp_path).write_text(json.dumps(body))


def written(tmp_path: Path) -> dict[str, list[object]]:
    """The file's entries: job -> [submitted, restarts, pending, highest, limit, run time, lowered_to]."""
    jobs: dict[str, list[object]] = json.loads(state_of(tmp_path).read_text())["jobs"]
    return jobs


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Clocked:
    """A guard on a faked clock (at NOW) that polled squeue's ``lines`` once; ``poll_at`` polls again."""

    def __init__(self, tmp_path: Path, lines: list[str]) -> None:
        self.clock = Clock()
        self.slurm = FakeSlurm(lines)
        self.guard, _ = make_guard(self.slurm, tmp_path, clock=self.clock)
        self.guard.poll()

    def poll_at(self, after: float, *lines: str) -> None:
        """Poll ``after`` seconds past NOW, squeue listing ``lines`` (as before if none)."""
        self.clock.now = NOW + after
        if lines:
            self.slurm.listing = "\n".join(lines) + "\n"
        self.guard.poll()


def test_a_restarted_guard_goes_on_from_what_the_last_one_saw(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # 6 runs, extended to 100 min already; 7 was requeued once and waits at the 100 min it ran with.
    slurm = FakeSlurm(
        [
            line("6", "1:40:00", "50:00", EXTEND),
            line("7", "1:40:00", "0:00", TIME_MIN, state="PD", nodes="", restarts=1),
        ]
    )
    make_guard(slurm, tmp_path)[0].poll()
    # The guard stops; meanwhile 6's user lowers it to 80 and 7's to 50. A new guard:
    slurm.listing = "\n".join(
        [
            line("6", "1:20:00", "1:19:00", EXTEND),
            line("7", "50:00", "0:00", TIME_MIN, state="PD", restarts=1),
        ]
    )
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    slurm.listing = "\n".join(
        [line("6", "1:20:00", "1:19:00", EXTEND), line("7", "50:00", "49:00", TIME_MIN, restarts=1)]
    )
    report = guard.poll()
    assert report is not None and report.shortened == 0 and slurm.updates == []
    assert "job 6: limit lowered from 100 to 80 min while it ran" in caplog.text
    assert "2 jobs as the last guard saw them" in caplog.text


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xffnot json",
        b"[1, 2]",
        b'{"format": "harp-guard-limits/0", "jobs": {}}',
        b'{"format": "harp-guard-limits/1", "jobs": []}',
        b'{"format": "harp-guard-limits/1", "jobs": {}, "raised": []}',
        b'{"name": "someone else\'s"}',
        b'{"format": "harp-guard-limits/1", "jobs": {"1": ["s", ' + b"9" * 5000 + b"]}}",
        b"[" * 100_000,
    ],
    ids=["bytes", "list", "format0", "jobs-list", "raised-list", "foreign", "5000-digit-int", "nested-100k"],
)
def test_a_corrupt_or_foreign_file_is_logged_and_ignored(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    state_of(tmp_path).parent.mkdir()
    state_of(tmp_path).write_bytes(content)
    slurm = FakeSlurm([line("6", "40:00", "39:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert "ignored" in caplog.text
    assert report is not None and report.good and slurm.updates == [("6", 41)] and guard.heartbeat.alive()
    assert list(seen_file.load(state_of(tmp_path))) == ["6"]  # written over with what it saw


def test_a_file_larger_than_any_of_ours_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_state(tmp_path, {"format": seen_file.FORMAT, "jobs": {}})
    monkeypatch.setattr(seen_file, "MAX_BYTES", state_of(tmp_path).stat().st_size - 1)
    assert seen_file.load(state_of(tmp_path)) == {}
    assert f"{state_of(tmp_path)} is not a {seen_file.FORMAT} file, ignored" in caplog.text


def test_an_entry_that_does_not_read_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = [SUBMITTED, 0, False, 100, 80, 3000.0, 80]  # 6 was lowered from 100 to 80 while it ran
    bad = {
        "1": [SUBMITTED, 0, True, 100, 80, 0.0, 100],  # "lowered" to its highest while pending
        "8": [SUBMITTED, 0, True, 100, 80, 0.0, 101],  # lowered above its highest while pending
        "9": [SUBMITTED, 0, True, 100, 80, 0.0, None, 700],  # "raised" while pending
        "2": [SUBMITTED, -1, False, 100, 80, 3000.0, None],
        "3": [SUBMITTED, 0, 0, 100, 80, 3000.0, None],  # not a bool
        "4": [SUBMITTED, 0, False, True, 80, 3000.0, None],  # a bool, not a count
        "5": [SUBMITTED, 0, False, 100, 80],
        "7": "6",
    }
    write_state(tmp_path, {"format": seen_file.FORMAT, "jobs": {"6": good, **bad}})
    slurm = FakeSlurm([line("6", "1:20:00", "1:19:00", EXTEND), line("1", "1:20:00", "1:19:00", EXTEND)])
    make_guard(slurm, tmp_path)[0].poll()
    assert slurm.updates == [("1", 100)] and "8 entries that do not read ignored" in caplog.text


@pytest.mark.parametrize(
    "entry",
    [
        [SUBMITTED, 0, False, 60, 60, int("1" + "0" * 400), None],  # a run time float() cannot hold
        [SUBMITTED, 0, False, 60, 60, 1e400, None],  # read as infinity
        [SUBMITTED, 0, False, 60, 60, float("nan"), None],
        [SUBMITTED, 0, False, 2**64, 60, 600.0, None],  # past 2**60, as in_range
        [SUBMITTED, 0, False, 60, 60, 600.0, 10**400],
    ],
    ids=["400-digit-run-time", "infinite-run-time", "nan-run-time", "2**64-highest", "400-digit-lowering"],
)
def test_an_entry_with_a_number_out_of_range_is_skipped_and_the_guard_starts(
    tmp_path: Path, entry: list[object], caplog: pytest.LogCaptureFixture
) -> None:
    # The audit's case: a run time of 400 digits (valid JSON, below the decoder's 4300) raised
    # OverflowError out of the guard's start, at every start: the guard never ran.
    body = {"format": seen_file.FORMAT, "jobs": {"7": entry, "8": [SUBMITTED, 0, False, 600, 300, 10.0, 300]}}
    state_of(tmp_path).parent.mkdir()
    state_of(tmp_path).write_text(json.dumps(body))  # 1e400 and NaN as Python's json writes them
    slurm = FakeSlurm([line("8", "5:00:00", "4:59:00", TIME_MIN), line("6", "40:00", "39:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    report = guard.poll()
    assert report is not None and report.good and slurm.updates == [("6", 41)]  # 8 kept at its 300
    assert "1 entries that do not read ignored" in caplog.text


def test_a_raise_or_start_beside_an_entry_that_does_not_read_keeps_its_lowering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Dropped whole, each entry's lowering went with it: the guard extended 6 and 7 past their users'.
    body = {
        "format": seen_file.FORMAT,
        "jobs": {
            "6": [SUBMITTED, 0, False, 100, 80, 4740.0, 80],  # lowered from 100 to 80 while it ran
            "7": [SUBMITTED, 0, True, 301, 300, 0.0, 300],  # lowered to 300 while pending, then started
            "8": [SUBMITTED, 0, True, 100, 80, 0.0, None],
        },
        "raised": {"6": "700", "8": 700},  # not a count; raised while pending
        "started_below": {"7": [100, 100, -1]},  # a run time of -1
    }
    write_state(tmp_path, body)
    slurm = FakeSlurm([line("6", "1:20:00", "1:19:00", EXTEND), line("7", "4:50:00", "4:49:00", TIME_MIN)])
    make_guard(slurm, tmp_path)[0].poll()
    assert slurm.updates == [("7", 300)]  # 6 not past its 80, 7 up to its 300, not past it
    assert "2 raised values that do not read ignored, their entries kept" in caplog.text
    assert "1 started_below values that do not read ignored, their entries kept" in caplog.text
    assert "entries that do not read" not in caplog.text


def test_another_job_under_the_same_id_is_not_taken_for_it(tmp_path: Path) -> None:
    # Job ids start again from 1 on a reinstalled cluster: the file's 6 ran at 100 min, this 6 is new.
    old = ["2020-01-01T00:00:00", 0, False, 100, 100, 0, None]
    write_state(tmp_path, {"format": seen_file.FORMAT, "jobs": {"6": old}})
    slurm, _ = polled(tmp_path, [line("6", "40:00", "39:00", EXTEND)])
    assert slurm.updates == [("6", 41)]


def test_gone_jobs_are_dropped_and_run_times_alone_write_nothing(tmp_path: Path) -> None:
    polled(tmp_path, [line("6", "40:00", "10:00", EXTEND), line("7", "40:00", "10:00", EXTEND)])
    polled(tmp_path, [line("7", "40:00", "11:00", EXTEND)])  # a guard after the last
    assert list(seen_file.load(state_of(tmp_path))) == ["6", "7"]  # 6 missing from one listing: kept
    polled(tmp_path, *[[line("7", "40:00", "11:00", EXTEND)]] * MISSING_POLLS)
    written = state_of(tmp_path).stat()
    assert list(seen_file.load(state_of(tmp_path))) == ["7"]
    polled(tmp_path, [line("7", "40:00", "12:00", EXTEND)])
    assert state_of(tmp_path).stat().st_ino == written.st_ino  # not replaced


def test_a_file_that_cannot_be_written_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "not-a-dir").write_text("")
    slurm = FakeSlurm([line("6", "40:00", "39:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path, state=tmp_path / "not-a-dir" / "limits.json")
    report = guard.poll()
    slurm.listing = line("7", "40:00", "39:00", EXTEND) + "\n"
    guard.poll()
    assert report is not None and report.good and guard.heartbeat.alive()
    assert slurm.updates == [("6", 41), ("7", 41)] and caplog.text.count("could not write") == 1


def test_a_fifo_as_the_state_file_is_refused_not_waited_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """open() of a FIFO waits for a writer: the guard would never start polling."""
    state_of(tmp_path).parent.mkdir()
    said = not_a_file(state_of(tmp_path), "FIFO")
    loaded: list[object] = []
    assert raised_within(5, lambda: loaded.append(seen_file.load(state_of(tmp_path)))) is None
    assert loaded == [{}] and said in caplog.text


def test_jobs_coming_and_going_are_written_at_most_once_a_minute(tmp_path: Path) -> None:
    clocked = Clocked(tmp_path, [line("6", "40:00", "10:00", EXTEND)])  # its first poll writes what it saw
    for job, after in (("7", 5), ("8", 30), ("9", 59)):  # a job ends and another starts every poll
        clocked.poll_at(after, line(job, "40:00", "10:00", EXTEND))
        assert list(written(tmp_path)) == ["6"]
    clocked.poll_at(seen_file.SAVE_INTERVAL_S)
    assert sorted(written(tmp_path)) == ["6", "7", "8", "9"]  # gone for fewer than MISSING_POLLS listings


def test_an_own_limit_seen_or_given_up_is_written_at_once(tmp_path: Path) -> None:
    clocked = Clocked(tmp_path, [pending("5", "10:00:00", TIME_MIN), line("6", "1:40:00", "50:00", EXTEND)])

    def polled_after(seconds: float, five: str, six: str) -> dict[str, object]:
        """The lowered limits written once 5 is pending at ``five`` and 6 runs at ``six``."""
        clocked.poll_at(seconds, pending("5", five, TIME_MIN), line("6", six, "50:10", EXTEND))
        return {job: entry[6] for job, entry in written(tmp_path).items()}

    assert polled_after(5, "5:00:00", "1:40:00") == {"5": 300, "6": None}  # 5 lowered while pending
    # 5 raised back while pending (its own 600 again), 6 lowered while it runs
    assert polled_after(10, "10:00:00", "1:20:00") == {"5": None, "6": 80}


def test_a_job_pending_again_under_the_same_restart_count_is_written_at_once(tmp_path: Path) -> None:
    # Seen running at 100 min, then pending at 80 (Slurm counts a restart at every requeue; should a
    # job wait again without one): a new spell, whose highest is below the run's. Left waiting, a
    # crash would leave the old highest on disk, and a restarted guard that first saw the job run
    # again at 80 would take that for its user's lowering.
    clocked = Clocked(tmp_path, [line("6", "1:40:00", "50:00", EXTEND)])
    clocked.poll_at(5, pending("6", "1:20:00", EXTEND))
    assert written(tmp_path)["6"][2:5] == [True, 80, 80]  # pending, highest, limit of the new spell


def test_a_start_below_a_limit_lowered_while_pending_outlives_a_restart(tmp_path: Path) -> None:
    # The audit's case: lowered from 600 to 300 min while pending, then started by backfill at 100
    # (within time_min). The run's entry holds a lowering (300) above its highest (100): the file
    # refused it ("lowered above its highest"), and a restarted guard extended the job to 340.
    slurm, guard = polled(
        tmp_path,
        [pending("5", "10:00:00", TIME_MIN)],
        [pending("5", "5:00:00", TIME_MIN)],
        [line("5", "1:40:00", "1:00", TIME_MIN)],
    )
    guard.close()
    kept = seen_file.load(state_of(tmp_path))["5"]
    assert (kept.pending, kept.highest, kept.limit, kept.elapsed_s, kept.lowered_to) == (
        False,
        100,
        100,
        60,
        300,
    )
    slurm.listing = line("5", "4:50:00", "4:49:00", TIME_MIN) + "\n"  # extended to 290 meanwhile
    restarted, _ = make_guard(slurm, tmp_path)
    restarted.poll()
    assert slurm.updates == [("5", 300)]  # up to its user's 300, not past it


def older_entry(entry: object) -> tuple[object, ...] | None:
    """(pending, limit, lowered_to) of an entry as the guard of the version before raises read it
    (57dccab's seen_file._entry); None for an entry it dropped whole, its lowering with it."""
    if not isinstance(entry, list) or len(entry) != 7:
        return None
    submitted, restarts, pending, highest, limit, elapsed, lowered = entry
    counts = (restarts, highest, limit) if lowered is None else (restarts, highest, limit, lowered)
    if not (
        isinstance(submitted, str)
        and isinstance(pending, bool)
        and all(type(n) is int and n >= 0 for n in counts)
        and type(elapsed) in (int, float)
        and elapsed >= 0
        and (lowered is None or (lowered < highest if pending else lowered <= highest))
    ):
        return None
    return pending, limit, lowered


def test_a_guard_rolled_back_one_version_reads_every_entry_and_keeps_the_lowerings(tmp_path: Path) -> None:
    # 5 lowered from 600 to 300 while pending, started by backfill at 100; 6 raised to 900 while
    # pending, started at 400; 8 raised to 900 then lowered to 700, started at 400; 7 lowered to 80
    # while it ran. The first guard with raises (30fc54b) wrote 6's and 8's as an eighth item, and 5's
    # and 8's lowering above their runs' highest: a guard rolled back to the version before dropped
    # the three entries whole, and extended 5 to its t0 (600), past its user's 300.
    def listing(five: str, six: str, eight: str) -> list[str]:
        waits = {"5": five, "6": six, "8": eight}
        return [pending(job, limit, TIME_MIN) for job, limit in waits.items()] + [
            line("7", "1:40:00", "50:00", EXTEND)
        ]

    started = [
        line(job, limit, "1:00", TIME_MIN)
        for job, limit in (("5", "1:40:00"), ("6", "6:40:00"), ("8", "6:40:00"))
    ]
    slurm, guard = polled(
        tmp_path,
        listing("10:00:00", "10:00:00", "10:00:00"),
        listing("5:00:00", "15:00:00", "15:00:00"),
        listing("5:00:00", "15:00:00", "11:40:00"),
        [*started, line("7", "1:20:00", "51:00", EXTEND)],
    )
    guard.close()
    jobs = json.loads(state_of(tmp_path).read_text())["jobs"]
    # The older guard reads every entry: 5 and 8 as the pending spell they started from, at the
    # limit they were lowered to (its next poll reads the start again, the lowering kept); 6 and 8
    # without their raises (it extends them up to t0, as it always did).
    assert {job: older_entry(entry) for job, entry in jobs.items()} == {
        "5": (True, 300, 300),
        "6": (False, 400, None),
        "8": (True, 700, 700),
        "7": (False, 80, 80),
    }
    assert seen_file.load(state_of(tmp_path)) == guard._lowered.seen  # this guard reads it all back
    # A restarted guard extends each up to its own limit: 300, the raise's 900, 700; 7 stays at 80.
    slurm.listing = "\n".join(
        [
            line("5", "4:50:00", "4:49:00", TIME_MIN),
            line("6", "14:50:00", "14:49:00", TIME_MIN),
            line("8", "11:30:00", "11:29:00", TIME_MIN),
            line("7", "1:20:00", "1:19:00", EXTEND),
        ]
    )
    make_guard(slurm, tmp_path)[0].poll()
    assert sorted(slurm.updates) == [("5", 300), ("6", 900), ("8", 700)]


def test_an_entry_with_a_raise_as_its_eighth_item_still_reads(tmp_path: Path) -> None:
    # As the first guard with raises (30fc54b) wrote them.
    write_state(
        tmp_path, {"format": seen_file.FORMAT, "jobs": {"6": [SUBMITTED, 0, False, 400, 400, 60, None, 900]}}
    )
    assert seen_file.load(state_of(tmp_path))["6"].raised_to == 900


def test_a_guard_that_crashed_lost_only_what_errs_towards_extending(tmp_path: Path) -> None:
    clocked = Clocked(tmp_path, [pending("5", "10:00:00", TIME_MIN)])
    clocked.poll_at(5, pending("5", "5:00:00", TIME_MIN))  # lowered by its user,
    clocked.poll_at(10, pending("5", "10:00:00", TIME_MIN))  # then raised back
    clocked.poll_at(15, pending("5", "10:00:00", TIME_MIN), line("7", "1:40:00", "50:00", EXTEND))
    assert list(written(tmp_path)) == ["5"]  # 7, first seen at 100 min, waits
    left = state_of(tmp_path).read_bytes()
    slurm, clock = clocked.slurm, clocked.clock
    del clocked  # it crashed: what it had not written is lost (the finalizer writes it; undone below)
    state_of(tmp_path).write_bytes(left)
    # While no guard ran, backfill started 5 at 280 min and 7's user lowered it to 80.
    slurm.listing = "\n".join(
        [line("5", "4:40:00", "4:39:00", TIME_MIN), line("7", "1:20:00", "1:19:00", EXTEND)]
    )
    make_guard(slurm, tmp_path, clock=clock)[0].poll()
    # 5 towards its user's 600 again, not held at the 300 given up; 7 past the lowering that no
    # guard saw, as a job first seen at 80 min would be (towards its t0, never short of it).
    assert slurm.updates == [("5", 340), ("7", 100)]


@pytest.mark.parametrize("how", ["closed", "collected"])
def test_what_waited_is_written_when_the_guard_stops(tmp_path: Path, how: str) -> None:
    clocked = Clocked(tmp_path, [line("6", "40:00", "10:00", EXTEND)])
    clocked.poll_at(5, line("7", "40:00", "10:00", EXTEND))
    assert list(written(tmp_path)) == ["6"]
    if how == "closed":
        clocked.guard.close()
    else:
        del clocked
        gc.collect()
    assert sorted(written(tmp_path)) == ["6", "7"]
