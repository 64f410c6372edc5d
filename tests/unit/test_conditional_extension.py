"""The conditional extension: what it learns from (tagged ended jobs), the file the harvester writes
for the guard, and the guard extending by it (Slurm faked at the subprocess boundary)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import stat
from pathlib import Path

import pytest

from slurm_harp.accounting import extension_file
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.extension import WINDOW_DAYS, ConditionalRatios, Extension, next_limit, observed_ratio
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.guard.extension_history import CHECK_S, ExtensionHistory
from tests.conftest import not_a_file
from tests.unit.test_guard import NOW, FakeSlurm, line, make_guard

LEAD = 40.0
# The upper edge of the bin 2.5 falls in (40 bins a decade): what a quantile over 2.5s answers.
EDGE_2_5 = 10 ** (16 / 40)


def record(
    tag: str | None, minutes: float, *, limit: int = 60, state: str = "COMPLETED", end: float = NOW
) -> JobRecord:
    return JobRecord(
        job_id="1",
        request=JobRequest(time_limit_minutes=limit, submit_time=int(end - minutes * 60 - 10)),
        state=state,
        elapsed_s=round(minutes * 60),
        end_time=int(end),
        harp_tag=tag,
    )


def test_the_quantile_of_the_jobs_that_outlived_the_same_multiple() -> None:
    ratios = ConditionalRatios([0.5] * 100 + [2.5] * 16 + [8.0] * 4)
    assert len(ratios) == 120
    # Above 1: 20 jobs, 80 % of them within 2.5.
    assert ratios.quantile_above(1.0) == pytest.approx(EDGE_2_5)
    # Above 3 only the four 8s remain: too few to say anything.
    assert ratios.quantile_above(3.0) is None
    assert ConditionalRatios.from_counts(ratios.counts).counts == ratios.counts


@pytest.mark.parametrize(
    "counts",
    [None, [1, 2], [-1] * 161, [0.5] * 161, "x", [2**63] + [0] * 160, [10**400] + [0] * 160, [10**8] * 161],
    ids=["none", "short", "negative", "float", "str", "2**63", "10**400", "total-past-max"],
)
def test_saved_counts_that_are_not_ours_are_refused(counts: object) -> None:
    # Counts past sys.maxsize (or summing past it) made len() raise OverflowError in the guard.
    with pytest.raises(ValueError, match="non-negative integers"):
        ConditionalRatios.from_counts(counts)


def test_which_ended_jobs_the_extension_learns_from() -> None:
    # Shadow: the user's own limit is the job's; harp's value 10 min, ran 25: 2.5.
    assert observed_ratio(record("harp:shadow,t=10,v=x", 25)) == pytest.approx(2.5)
    # Extend: the own limit is on the tag (the job's limit is whatever the guard left).
    assert observed_ratio(record("harp:extend,t!=10,t0=60,v=x", 40, limit=40)) == pytest.approx(4.0)
    # Stopped at its own limit: counted, at the limit (the most it could show).
    assert observed_ratio(record("harp:extend,t!=10,t0=60,v=x", 60, state="TIMEOUT")) == pytest.approx(6.0)
    # Killed at a limit harp lowered: only a lower bound, left out.
    assert observed_ratio(record("harp:rewrite,t!=10,t0=60,v=x", 10.5, limit=10, state="TIMEOUT")) is None
    # Not below the user's own limit: there was nothing to extend.
    assert observed_ratio(record("harp:shadow,t=60,v=x", 25)) is None
    assert observed_ratio(record("harp:shadow,m=100,v=x", 25)) is None
    assert observed_ratio(record(None, 25)) is None
    assert observed_ratio(record("harp:shadow,t=0,v=x", 25)) is None


def test_next_limit_jumps_to_the_quantile_where_the_history_knows_enough() -> None:
    ratios = ConditionalRatios([2.5] * 30)
    ext = next_limit(10, 10, 600, elapsed_s=10 * 60 - LEAD, lead_s=LEAD, ratios=ratios)
    assert ext == Extension(math.ceil(10 * EDGE_2_5), conditional=True)  # 26 min, where a step gives 11
    assert next_limit(10, 10, 600, 10 * 60 - LEAD, LEAD) == Extension(11)
    # Past every ratio it knows: Tsafrir's steps again (10 + 30 is the first step beyond 26 + lead).
    again = next_limit(10, 26, 600, elapsed_s=26 * 60 - LEAD, lead_s=LEAD, ratios=ratios)
    assert again == Extension(40)
    # Never past the user's own limit or a site bound.
    assert next_limit(10, 10, 20, 10 * 60 - LEAD, LEAD, ratios=ratios) == Extension(20, conditional=True)
    capped = next_limit(10, 10, 600, 10 * 60 - LEAD, LEAD, bound_minutes=15, ratios=ratios)
    assert capped == Extension(15, capped_by_bound=True, conditional=True)
    # Always at least the lead time from now, however low the quantile.
    low = ConditionalRatios([1.05] * 30)
    assert next_limit(10, 10, 600, 10 * 60 - 5, 120.0, ratios=low) == Extension(12, conditional=True)


def test_the_harvester_s_file_round_trips_and_holds_only_the_window(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    old = NOW - (WINDOW_DAYS + 1) * 86400
    jobs = [
        record("harp:shadow,t=10,v=x", 25, end=NOW - 3600),
        record("harp:shadow,t=10,v=x", 80, end=old),  # ended before the window
        record("harp:extend,t!=10,t0=60,v=x", 40, limit=40, end=NOW - 60),
        record(None, 30, end=NOW - 60),
    ]
    with JobStore(db) as store:
        store.upsert([dataclasses.replace(job, job_id=str(i)) for i, job in enumerate(jobs)], "sacct")
        ratios = extension_file.ratios_from(store, NOW)
    assert len(ratios) == 2
    path = extension_file.path_for(db)
    assert path == tmp_path / "jobs.extension.json"
    extension_file.write(path, ratios, NOW)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    back, computed = extension_file.read(path)
    assert back.counts == ratios.counts and computed == int(NOW)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not an extension file"),
        (b'{"format": 1, "bins_per_decade": 10, "computed": 1, "counts": []}', "bins_per_decade 10"),
        (b'{"format": 1, "bins_per_decade": 40, "counts": []}', "no computed time"),
        (b'{"format": 1, "bins_per_decade": 40, "computed": 1' + b"0" * 400 + b"}", "no computed time"),
        (b'{"format": 1, "bins_per_decade": 40, "computed": 1, "counts": [1]}', "non-negative integers"),
        (b" " * (extension_file.MAX_BYTES + 1), "larger than"),
    ],
)
def test_a_file_that_is_not_ours_is_refused_by_name(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "jobs.extension.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        extension_file.read(path)


def test_the_guard_s_history_keeps_the_last_good_ratios_and_a_removed_file_means_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.extension.json"
    clock = [NOW]
    history = ExtensionHistory(path, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING):
        assert history.ratios() is None  # no file yet: steps
        clock[0] += CHECK_S
        assert history.ratios() is None
    assert [r.getMessage() for r in caplog.records].count(
        f"extension history {path}: [Errno 2] No such file or directory: '{path}'; extending by steps"
    ) == 1
    extension_file.write(path, ConditionalRatios([2.5] * 30), NOW)
    clock[0] += CHECK_S
    good = history.ratios()
    assert good is not None and len(good) == 30
    path.write_text(json.dumps({"format": 1}))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        clock[0] += CHECK_S
        assert history.ratios() is good
    assert "keeping the last good one" in caplog.text
    # Removed after a good one: the steps, as docs/guard.md says (before, the last good figures
    # served for as long as the guard ran).
    path.unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            clock[0] += CHECK_S
            assert history.ratios() is None
    assert caplog.text.count("No such file or directory") == 1 and "extending by steps" in caplog.text
    extension_file.write(path, ConditionalRatios([2.5] * 30), NOW)  # back
    clock[0] += CHECK_S
    assert history.ratios() is not None


@pytest.mark.timeout(10)  # open() of a FIFO waits for a writer: a regression fails, not hangs
def test_a_fifo_is_neither_read_by_the_guard_nor_written_by_the_harvester(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.extension.json"
    said = not_a_file(path, "FIFO")
    with caplog.at_level(logging.WARNING):
        assert ExtensionHistory(path, clock=lambda: NOW).ratios() is None
    assert f"extension history {path}: {path} is {said}; extending by steps" in caplog.text
    # The harvester's temporary file had a fixed name beside it: a FIFO there would block the write.
    not_a_file(tmp_path / f".{path.name}.{os.getpid()}", "FIFO")
    extension_file.write(path, ConditionalRatios([2.5] * 30), NOW)
    assert len(extension_file.read(path)[0]) == 30


def test_the_guard_extends_by_the_history_and_counts_what_it_knows(tmp_path: Path) -> None:
    path = tmp_path / "jobs.extension.json"
    extension_file.write(path, ConditionalRatios([2.5] * 30), NOW)
    listing = [line("1", "10:00", "9:20", "harp:extend,t!=10,t0=600,v=x")]  # 40 s left
    slurm = FakeSlurm(listing)
    guard, registry = make_guard(slurm, tmp_path, lead_seconds=120.0)
    guard.configure(guard.settings, ExtensionHistory(path, clock=lambda: NOW))
    guard.poll()
    assert slurm.updates == [("1", 26)]
    assert registry.get_sample_value("harp_guard_extension_history_jobs") == 30
    # extension = "steps": the history is not consulted.
    slurm = FakeSlurm(listing)
    guard, registry = make_guard(slurm, tmp_path, lead_seconds=120.0, extension="steps")
    guard.configure(guard.settings, ExtensionHistory(path, clock=lambda: NOW))
    guard.poll()
    assert slurm.updates == [("1", 15)]  # 10 + 5: the first step that leaves the lead
    assert registry.get_sample_value("harp_guard_extension_history_jobs") == 0


@pytest.mark.parametrize("big", [2**63, 10**400], ids=["2**63", "10**400"])
def test_absurd_counts_are_refused_by_name_and_the_guard_extends_by_steps(
    tmp_path: Path, big: int, caplog: pytest.LogCaptureFixture
) -> None:
    # A well-formed file whose counts overflowed len(): every poll raised and no job was extended.
    path = tmp_path / "jobs.extension.json"
    counts = [0] * len(ConditionalRatios().counts)
    counts[5] = big
    path.write_text(json.dumps({"format": 1, "computed": 1, "bins_per_decade": 40, "counts": counts}))
    listing = [line("1", "10:00", "9:20", "harp:extend,t!=10,t0=600,v=x")]  # 40 s left
    slurm = FakeSlurm(listing)
    guard, _ = make_guard(slurm, tmp_path, lead_seconds=120.0)
    guard.configure(guard.settings, ExtensionHistory(path, clock=lambda: NOW))
    for _ in range(2):
        report = guard.poll()
        assert report is not None and report.good and guard.heartbeat.alive()
    assert slurm.updates == [("1", 15), ("1", 15)]  # Tsafrir's step, each poll
    assert f"extension history {path}: counts must be 161 non-negative integers" in caplog.text


def test_ratios_that_fail_in_the_poll_fall_back_to_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Whatever the ratios raise, read or used, the due job is still extended (by a step), logged.
    class Broken(ConditionalRatios):
        def __len__(self) -> int:
            raise OverflowError("cannot fit 'int' into an index-sized integer")

        def quantile_above(self, ratio: float) -> float | None:
            raise OverflowError("int too large to convert to float")

    class History(ExtensionHistory):
        def ratios(self) -> ConditionalRatios | None:
            return Broken()

    listing = [line("1", "10:00", "9:20", "harp:extend,t!=10,t0=600,v=x")]
    slurm = FakeSlurm(listing)
    guard, registry = make_guard(slurm, tmp_path, lead_seconds=120.0)
    guard.configure(guard.settings, History(None))
    report = guard.poll()
    assert report is not None and report.good and slurm.updates == [("1", 15)]
    assert registry.get_sample_value("harp_guard_extension_history_jobs") == 0
    assert "extension history unusable: extending by steps this poll" in caplog.text
    # len() passing, the quantile failing: that job alone falls back to a step.
    Broken.__len__ = lambda self: 0  # type: ignore[method-assign,assignment]
    slurm = FakeSlurm(listing)
    guard, _ = make_guard(slurm, tmp_path, lead_seconds=120.0)
    guard.configure(guard.settings, History(None))
    guard.poll()
    assert slurm.updates == [("1", 15)]
    assert "job 1: conditional extension failed: extended by a step" in caplog.text
