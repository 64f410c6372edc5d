from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_harp.accounting import (
    SACCT_FIELDS,
    JobRecord,
    ReadStats,
    extension_file,
    job_columns,
    load_records,
)
from slurm_harp.accounting import jobstore as jobstore_module
from slurm_harp.accounting import sacct_runner as sacct_module
from slurm_harp.accounting import upsert as upsert_module
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.accounting.sacct_runner import ENDED_STATES, sacct_time
from slurm_harp.cli import main
from slurm_harp.commands import harvest as harvest_command
from slurm_harp.commands import importer
from slurm_harp.commands import train as train_command
from slurm_harp.commands.harvest import harvest, windows
from slurm_harp.commands.harvest_cursor import FIRST_RUN_DAYS
from slurm_harp.commands.importer import source_name
from slurm_harp.core.extension import observed_ratio
from slurm_harp.core.request import JobRequest
from slurm_harp.core.tag import last_tag
from slurm_harp.core.text import bounded_text
from slurm_harp.learning.dataset import build_dataset
from tests.conftest import BUNDLED_TRACE, delimited, store_checksum, write_schema_version
from tests.unit.test_arguments import usage_error
from tests.unit.test_sacct import SACCT_TEXT

US = "\x1f"
HOUR, DAY = 3600, 86400
# What sacct prints with --delimiter=$'\x1f' (the harvester's choice), same jobs as test_sacct; its
# times are UTC, as sacct prints them under run_sacct.
TEXT = SACCT_TEXT.replace("|", US)


def _utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


NOW = _utc("2024-03-02T12:00:00")
LAST_END = _utc("2024-03-01T12:00:42")  # job 1030, the latest usable


def _arg(argv: Sequence[str], flag: str) -> str:
    return argv[list(argv).index(flag) + 1]


def _t(argv: Sequence[str], flag: str) -> int:
    return _utc(_arg(argv, flag))  # as sacct reads it under run_sacct


class FakeSacct:
    """The subprocess boundary: records a window's argv in ``calls`` and answers with ``outputs`` in
    turn (an exception is raised), split by the delimiter that argv gives. A re-read of a window's
    jobs by id (``sacct -j``, in ``step_calls``) is answered with the last window's text: its jobs
    with every step (the ids not asked for are more than sacct gives, and not read)."""

    def __init__(self, *outputs: str | Exception) -> None:
        self.outputs = list(outputs)
        self.calls: list[list[str]] = []
        self.step_calls: list[list[str]] = []
        self.last = ""

    def __call__(self, argv: Sequence[str]) -> str:
        if "-j" in argv:
            self.step_calls.append(list(argv))
            return delimited(self.last, argv, US)
        self.calls.append(list(argv))
        out = self.outputs[min(len(self.calls), len(self.outputs)) - 1]
        if isinstance(out, Exception):
            raise out
        self.last = out
        return delimited(out, argv, US)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "jobs.sqlite") as s:
        yield s


def _harvest(
    store: JobStore, runner: Callable[[Sequence[str]], str], **kw: object
) -> harvest_command.HarvestReport:
    args: dict[str, object] = {
        "source": "c1",
        "now": NOW,
        "overlap_s": HOUR,
        "settle_s": 60,
        "window_s": 40 * DAY,
    }
    args.update(kw)
    return harvest(store, runner, **args)  # type: ignore[arg-type]


def test_windows_cover_the_range_with_inclusive_ends() -> None:
    assert windows(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert windows(0, 8, 4) == [(0, 4), (4, 8)]
    assert windows(5, 5, 4) == [] and windows(6, 5, 4) == []


def test_first_run_reads_from_30_days_ago_to_now_minus_settle(store: JobStore) -> None:
    sacct = FakeSacct(TEXT)
    report = _harvest(store, sacct)
    (argv,) = sacct.calls
    assert argv[:4] == ["sacct", "-a", "-P", "--noconvert"]
    (delimiter,) = (a.split("=", 1)[1] for a in argv if a.startswith("--delimiter="))
    assert delimiter.startswith(US) and delimiter.endswith(US) and len(delimiter) == 18  # fresh_delimiter
    assert _arg(argv, "-o") == ",".join(SACCT_FIELDS)
    assert argv[-1] == "--state=" + ",".join(ENDED_STATES)  # finished jobs only, selected by End
    assert _t(argv, "-S") == NOW - FIRST_RUN_DAYS * DAY
    assert _t(argv, "-E") == NOW - 60
    assert store.count("c1") == 7 and report.inserted == 7 and report.updated == 0
    assert report.cursor_before is None and report.cursor == store.cursor("c1") == LAST_END


def test_next_run_starts_overlap_before_the_cursor_and_changes_nothing(store: JobStore) -> None:
    _harvest(store, FakeSacct(TEXT))
    checksum = store_checksum(store)
    sacct = FakeSacct(TEXT)
    stats = ReadStats()
    report = _harvest(store, sacct, now=NOW + HOUR, stats=stats)
    (argv,) = sacct.calls
    assert _t(argv, "-S") == LAST_END - HOUR
    assert _t(argv, "-E") == NOW + HOUR - 60
    assert (report.inserted, report.updated, stats.records) == (0, 0, 7)
    assert store_checksum(store) == checksum
    assert "0 new, 0 updated" in report.summary(stats) and "(moved)" not in report.summary(stats)


def test_a_row_read_half_filled_is_completed_by_the_overlap(store: JobStore) -> None:
    # Right after a job ends, accounting has no Partition/TimelimitRaw yet (fills in ~5 s later).
    full = "\n".join(TEXT.splitlines()[:2])
    half = full.replace(f"{US}batch{US}normal{US}", f"{US}{US}normal{US}").replace(
        f"{US}120{US}8000M", f"{US}{US}8000M"
    )
    _harvest(store, FakeSacct(half), settle_s=0)
    (job,) = store.records("c1")
    assert job.request.partition is None and job.request.time_limit_minutes is None
    report = _harvest(store, FakeSacct(full), settle_s=0)
    (job,) = store.records("c1")
    assert (report.inserted, report.updated) == (0, 1)
    assert job.request.partition == "batch" and job.request.time_limit_minutes == 120


def test_a_re_read_with_fewer_steps_or_unknowns_forgets_nothing(store: JobStore) -> None:
    """Job 1001's MaxRSS is its largest step's (1001.0, 3G). A re-read in the overlap whose .0
    line came out bad, or that lost the step lines and its partition, changes nothing stored."""
    lines = TEXT.splitlines()[:5]  # the header, job 1001 and its three steps
    _harvest(store, FakeSacct("\n".join(lines)), settle_s=0)
    (before,) = store.records("c1")
    assert before.max_rss_mb == 3072.0 and before.request.partition == "batch"
    checksum = store_checksum(store)
    truncated = [*lines[:4], lines[4][:30]]
    no_steps = [lines[0], lines[1].replace(f"{US}batch{US}normal{US}", f"{US}{US}normal{US}")]
    for reread in (truncated, no_steps):
        report = _harvest(store, FakeSacct("\n".join(reread)), now=NOW + HOUR, settle_s=0)
        assert (report.inserted, report.updated) == (0, 0)
        assert store_checksum(store) == checksum


def _job_1001(day: str, name: str, step_rss: str) -> str:
    """Job 1001's lines (the job, then its batch, extern and .0 steps) as run on ``day`` under the job
    name ``name``, its .0 step's MaxRSS ``step_rss``."""
    lines = [line.replace("2024-03-01", day) for line in TEXT.splitlines()[1:5]]
    lines[0] = lines[0].replace(f"{US}relax{US}", f"{US}{name}{US}")
    lines[3] = lines[3].replace(f"{US}3G{US}", f"{US}{step_rss}{US}")
    return "\n".join(lines)


HEADER_LINE = TEXT.splitlines()[0]
OLD_1001 = _job_1001("2024-03-01", "relax", "3G")  # ended 2024-03-01T11:00:00
NEW_1001 = _job_1001("2024-03-02", "other", "100M")  # the same id given again


def test_a_reused_job_id_is_stored_as_a_job_of_its_own_and_logged_once(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Keyed by id alone, the new job overwrote the old one, MaxRSS kept the old job's 3 GB."""
    _harvest(store, FakeSacct(f"{HEADER_LINE}\n{OLD_1001}"))
    with caplog.at_level(logging.WARNING):
        report = _harvest(store, FakeSacct(f"{HEADER_LINE}\n{NEW_1001}"), now=NOW + DAY)
    stored = [(r.job_id, r.request.submit_time, r.request.job_name, r.max_rss_mb) for r in store.records()]
    submit = _utc("2024-03-01T09:55:00")
    assert stored == [("1001", submit, "relax", 3072.0), ("1001", submit + DAY, "other", 100.0)]
    assert (report.inserted, report.updated, report.reused) == (1, 0, 1)
    (line,) = [r.getMessage() for r in caplog.records if "already stored" in r.getMessage()]
    assert line.startswith("harvest c1: 1 new jobs have the id of a job already stored")


def test_every_record_of_an_id_in_one_window_is_read_with_its_own_steps(store: JobStore) -> None:
    """sacct shows only the newest record of an id unless given --duplicates; with it, each job
    line is followed by its own steps."""
    sacct = FakeSacct(f"{HEADER_LINE}\n{OLD_1001}\n{NEW_1001}")
    report = _harvest(store, sacct, now=NOW + DAY)
    stored = [(r.request.job_name, r.max_rss_mb) for r in store.records("c1")]
    assert stored == [("relax", 3072.0), ("other", 100.0)]
    assert "--duplicates" in sacct.calls[0]
    assert (report.inserted, report.reused) == (2, 1)
    assert _harvest(store, sacct, now=NOW + DAY).reused == 0  # a re-read is no new job


def test_explicit_start_overrides_the_cursor(store: JobStore) -> None:
    _harvest(store, FakeSacct(TEXT))
    sacct = FakeSacct(TEXT)
    _harvest(store, sacct, start=NOW - 90 * DAY, window_s=100 * DAY)
    assert _t(sacct.calls[0], "-S") == NOW - 90 * DAY
    assert store.cursor("c1") == LAST_END  # and it never moves backwards


def test_nothing_to_read_when_the_settle_window_covers_everything(store: JobStore) -> None:
    store.upsert([], "c1", cursor=NOW - 60)
    sacct = FakeSacct(TEXT)
    report = _harvest(store, sacct, overlap_s=0, settle_s=60)
    assert sacct.calls == [] and report.windows == 0 and store.cursor("c1") == NOW - 60


def test_the_cursor_stays_inside_the_window_asked_for(store: JobStore) -> None:
    # A DBD host whose clock runs ahead reports an End after -E: the cursor must not jump past -E.
    sacct = FakeSacct(TEXT)
    now = LAST_END - 10 * 60
    _harvest(store, sacct, now=now, settle_s=0)
    assert store.cursor("c1") == now


class UtcSacct:
    """sacct as run_sacct runs it (TZ=UTC0): -S/-E read, and the jobs' times printed, in UTC; the
    jobs whose End is in [-S, -E], or whose id -j names. ``ends``: unix end times of 5-minute jobs;
    window calls are in ``calls``."""

    def __init__(self, ends: list[int]) -> None:
        self.ends = ends
        self.calls: list[list[str]] = []
        self.header, template = TEXT.splitlines()[:2]  # job 1001's line, without its steps
        self.names = self.header.split(US)
        self.template = template.split(US)

    def __call__(self, argv: Sequence[str]) -> str:
        ids = _arg(argv, "-j").split(",") if "-j" in argv else None  # a re-read by id: no window
        if ids is None:
            self.calls.append(list(argv))
        low, high = (0, 2**40) if ids is not None else (_t(argv, "-S"), _t(argv, "-E"))
        lines = [self.header]
        for n, end in enumerate(self.ends):
            if low <= end <= high and (ids is None or str(n + 1) in ids):
                values = dict(zip(self.names, self.template, strict=True))
                at = {"Submit": end - 310, "Start": end - 300, "End": end}
                values |= {name: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) for name, t in at.items()}
                values |= {"JobIDRaw": str(n + 1), "JobID": str(n + 1), "ElapsedRaw": "300"}
                lines.append(US.join(values[name] for name in self.names))
        return delimited("\n".join(lines), argv, US)


def test_jobs_that_end_while_the_clocks_go_back_keep_their_times(
    local_zone: Callable[[str], None], store: JobStore
) -> None:
    """Local time repeats 02:00-03:00 in Berlin on 2024-10-27; sacct printed local time and the
    windows were local, so a job ending at 02:30 (twice) was stored an hour off, or not at all."""
    local_zone("Europe/Berlin")
    change = _utc("2024-10-27T01:00:00")
    assert time.localtime(change - 1800).tm_hour == time.localtime(change + 1800).tm_hour == 2
    ends = list(range(change - 2 * HOUR, change + 2 * HOUR, 600))
    sacct = UtcSacct(ends)
    _harvest(store, sacct, start=change - 3 * HOUR, now=change + 3 * HOUR, window_s=1200, settle_s=0)
    stored = {int(r.job_id) - 1: r for r in store.records("c1")}
    assert {n: r.end_time for n, r in stored.items()} == dict(enumerate(ends))
    assert all(r.start_time == r.end_time - 300 for r in stored.values() if r.end_time is not None)
    # The later windows, read without a job, leave it at the last job's end (a week short of now).
    assert store.cursor("c1") == ends[-1]
    # The windows tile the span in UTC: one sacct call per 20 minutes, each 20 minutes long.
    assert [_t(argv, "-S") for argv in sacct.calls] == list(range(change - 3 * HOUR, change + 3 * HOUR, 1200))


def test_a_clock_stepped_back_sets_the_cursor_back_with_a_warning(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The controller's clock ran 2 hours ahead, then stepped back: the cursor it set is past now,
    and kept (it never moved back), the runs after read only from there and skipped every job
    ending meanwhile."""
    ahead = 2 * HOUR
    _harvest(store, UtcSacct([NOW + ahead - 600]), now=NOW + ahead, settle_s=60)
    assert store.cursor("c1") == NOW + ahead - 600
    sacct = UtcSacct([-1, NOW - 1800, NOW - 600])  # jobs 2 and 3, ended since the step
    with caplog.at_level(logging.WARNING):
        report = _harvest(store, sacct, now=NOW, settle_s=60)
    (argv,) = sacct.calls
    assert (_t(argv, "-S"), _t(argv, "-E")) == (
        NOW - 60 - HOUR,
        NOW - 60,
    )  # min(cursor, now - settle) - overlap
    assert (report.inserted, report.reused) == (2, 0)
    assert report.cursor == store.cursor("c1") == NOW - 60  # set back (a merge never moves it back)
    assert "the cursor, 2024-03-02T13:50:00 UTC, is 01:51:00 ahead of this host's clock" in caplog.text
    assert "(2024-03-02T11:59:00 UTC): the clock stepped back" in caplog.text


def test_after_a_clock_steps_back_every_job_is_harvested_once(store: JobStore) -> None:
    """A job ends every 5 minutes and the timer runs every 5 minutes; for half an hour the
    controller's clock, which stamps the jobs' End and runs the harvest, is 2 hours ahead. slurmdbd
    shows a job once it has ended. Before, the jobs ending in the 2 hours after the step were never
    harvested (the cursor stayed ahead); now every job is stored, once."""
    start = NOW - 8 * HOUR
    skewed = range(start + 2 * HOUR, start + 2 * HOUR + 1800)
    real_ends = list(range(start, start + 6 * HOUR, 300))
    stamped = [end + (2 * HOUR if end in skewed else 0) for end in real_ends]
    sacct = UtcSacct([])
    for real in range(start + 120, start + 8 * HOUR, 300):
        sacct.ends = [s if end <= real else -1 for s, end in zip(stamped, real_ends, strict=True)]
        host = real + (2 * HOUR if real in skewed else 0)
        _harvest(store, sacct, now=host, settle_s=60, window_s=DAY)
    ids = [int(r.job_id) - 1 for r in store.records("c1")]
    assert sorted(ids) == list(range(len(real_ends)))  # each job once: none lost, none twice
    assert {int(r.job_id) - 1: r.end_time for r in store.records("c1")} == dict(enumerate(stamped))
    assert store.cursor("c1") == stamped[-1]


def test_windows_are_separate_sacct_calls_and_transactions(store: JobStore) -> None:
    header = TEXT.splitlines()[0]
    sacct = FakeSacct(header, TEXT, header)  # the jobs ended in the second window
    report = _harvest(store, sacct, start=LAST_END - 2 * DAY, window_s=DAY, now=LAST_END + DAY + 60)
    assert report.windows == 3
    spans = [(_t(argv, "-S"), _t(argv, "-E")) for argv in sacct.calls]
    assert spans == windows(LAST_END - 2 * DAY, LAST_END + DAY, DAY)
    # A window read without a job moves it to its end, but no closer to now than a week.
    assert store.cursor("c1") == LAST_END


def test_a_crash_in_a_later_window_keeps_what_was_committed_and_resumes(store: JobStore) -> None:
    first, _, rest = TEXT.partition("\n1030")  # the latest job is in the second window
    second = TEXT.splitlines()[0] + "\n1030" + rest
    start = LAST_END - DAY - 60
    crashing = FakeSacct(first, RuntimeError("sacct exited 1: slurmdbd unreachable"))
    with pytest.raises(RuntimeError, match="unreachable"):
        _harvest(store, crashing, start=start, window_s=DAY, now=LAST_END + 120)
    assert len(crashing.calls) == 2
    assert store.count("c1") == 6 and store.cursor("c1") is not None
    resumed_from = store.cursor("c1")
    assert resumed_from is not None and resumed_from < LAST_END
    sacct = FakeSacct(second)
    report = _harvest(store, sacct, window_s=DAY, now=LAST_END + 120)
    assert _t(sacct.calls[0], "-S") == resumed_from - HOUR
    assert report.inserted == 1 and store.count("c1") == 7 and store.cursor("c1") == LAST_END


def test_a_failing_upsert_rolls_back_the_cursor_too(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real = job_columns.row_of

    def broken(record: JobRecord) -> tuple[object, ...]:
        if record.job_id == "1030":
            raise OSError("disk went away")
        return real(record)

    monkeypatch.setattr(upsert_module, "row_of", broken)  # as the store's writes imported it
    with pytest.raises(OSError, match="disk"):
        _harvest(store, FakeSacct(TEXT))
    assert store.cursor("c1") is None and store.count() == 0


def test_bad_lines_are_logged_with_their_number_and_counted(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    lines = TEXT.splitlines()
    lines.insert(3, "1099" + US + "garbage")
    stats = ReadStats()
    with caplog.at_level(logging.WARNING):
        _harvest(store, FakeSacct("\n".join(lines)), stats=stats)
    assert stats.bad_lines == 1 and store.count() == 7
    assert "]:4: 2 fields, header has 27" in caplog.text


HUGE = str(2**63)  # past SQLite's 64-bit integers (NO_VAL64 in a count is unknown: test_sacct)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("ElapsedRaw", HUGE),
        ("UID", HUGE),
        ("ReqCPUS", "9" * 400),
        ("ReqMem", "9" * 400 + "M"),
        ("TotalCPU", "9" * 400 + "-00:00:00"),
        ("ReqTRES", f"cpu=4,gres/gpu:a100={HUGE}"),
    ],
)
def test_a_number_too_large_to_store_is_a_bad_line_and_the_harvest_goes_on(
    store: JobStore, column: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One such value once made SQLite (or float()) raise OverflowError: the window's transaction
    rolled back and every later run stopped at the same window."""
    lines = TEXT.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("1002" + US))
    header = lines[0].split(US)
    values = lines[at].split(US)
    values[header.index(column)] = value
    lines[at] = US.join(values)
    stats = ReadStats()
    with caplog.at_level(logging.WARNING):
        _harvest(store, FakeSacct("\n".join(lines)), stats=stats)
    assert stats.bad_lines == 1 and store.count() == 6
    assert f"]:{at + 1}: number out of range" in caplog.text
    assert store.cursor("c1") == LAST_END  # the next run resumes after this window


def test_cli_prints_one_summary_line_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sacct = FakeSacct(TEXT)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    db = tmp_path / "jobs.sqlite"
    monkeypatch.setenv("HARP_DB", str(db))
    assert (
        main(["harvest", "--settle-seconds", "0", "--start", "2024-03-01T00:00Z", "--window-hours", "87840"])
        == 0
    )
    out = capsys.readouterr().out.strip()
    assert out.startswith("harvest sacct: 1 windows, ") and "7 jobs, 0 bad lines, 7 new, 0 updated" in out
    assert f"cursor {sacct_time(LAST_END)} UTC (moved)" in out
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(RuntimeError("sacct exited 1: boom")))
    assert main(["harvest", "--db", str(db)]) == 1
    assert "stopped early" in capsys.readouterr().out
    with JobStore(db) as s:
        assert s.count("sacct") == 7 and s.cursor("sacct") == LAST_END


def test_cli_harvest_stores_a_source_name_not_utf8_with_question_marks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """--source-name b"s\\xff" failed every run (SQLite stores no surrogate: "harvest stopped at
    sacct: 'utf-8' codec can't encode ..."). Stored under "s?" now, as `harp import` stores it."""
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(TEXT))
    db = tmp_path / "jobs.sqlite"
    argv = ["harvest", "--db", str(db), "--source-name", os.fsdecode(b"s\xff"), "--settle-seconds", "0"]
    assert main([*argv, "--start", "2024-03-01T00:00Z", "--window-hours", "87840"]) == 0
    assert "harvest s?: 1 windows" in capsys.readouterr().out
    assert "source name 's\\udcff' is not UTF-8: its jobs are stored under 's?'" in caplog.text
    assert main(argv) == 0  # the next run resumes from that source's cursor
    with JobStore(db, readonly=True) as s:
        assert s.sources() == ["s?"] and s.count() == 7 and s.cursor("s?") == LAST_END


@pytest.mark.parametrize("stored", ["3", "garbled"])
def test_cli_harvest_names_a_job_store_of_a_newer_or_garbled_schema_not_sacct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stored: str
) -> None:
    """It said `harvest stopped at sacct: invalid literal for int() with base 10: 'garbled'`,
    naming neither the store nor its schema_version; sacct was never run."""
    sacct = FakeSacct(TEXT)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    db = tmp_path / "jobs.sqlite"
    JobStore(db).close()
    write_schema_version(db, stored)
    assert main(["harvest", "--db", str(db)]) == 1
    assert f"harvest not started: {db}: schema_version {stored!r} is " in caplog.text
    assert "stopped at sacct" not in caplog.text and sacct.calls == []


HARVEST_ALL = ["harvest", "--settle-seconds", "0", "--start", "2024-03-01T00:00Z", "--window-hours", "87840"]


def _lock(db: Path) -> sqlite3.Connection:
    """Another writer holding the store at ``db``."""
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    return other


def test_cli_harvest_names_a_damaged_store_and_says_no_run_gets_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """It said `harvest stopped at sacct: file is not a database` and `(stopped early: the next
    run resumes)`: neither the store nor its path, and no run resumes past a damaged store."""
    sacct = FakeSacct(TEXT)
    monkeypatch.setattr(sacct_module, "run_sacct", sacct)
    db = tmp_path / "jobs.sqlite"
    db.write_bytes(b"this is not sqlite at all" * 100)
    with caplog.at_level(logging.ERROR):
        assert main(["harvest", "--db", str(db)]) == 1
    assert (
        f"harvest stopped: the job store {db} is damaged or no SQLite database (file is not a database): "
        in (caplog.text)
    )
    assert "every run stops here until it is restored or moved away" in caplog.text
    assert "at sacct" not in caplog.text and sacct.calls == []


@pytest.mark.parametrize("when", ["opened", "written"])
def test_cli_harvest_names_a_locked_store_and_resumes_after_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    when: str,
) -> None:
    """Locked when opened, or by the time a window is stored: `harvest stopped at sacct[...]:
    database is locked` blamed sacct. The store is named, and the next run does resume."""
    db = tmp_path / "jobs.sqlite"
    JobStore(db).close()
    monkeypatch.setattr(jobstore_module, "LOCK_WAIT_S", 0.1)
    held: list[sqlite3.Connection] = [_lock(db)] if when == "opened" else []

    def sacct(argv: Sequence[str]) -> str:
        held.append(_lock(db))  # another writer takes the store while sacct runs
        return FakeSacct(TEXT)(argv)

    monkeypatch.setattr(sacct_module, "run_sacct", sacct if when == "written" else FakeSacct(TEXT))
    with caplog.at_level(logging.ERROR):
        assert main([*HARVEST_ALL, "--db", str(db)]) == 1
    assert f"harvest stopped: the job store {db} is locked: another writer" in caplog.text
    assert "at sacct" not in caplog.text
    assert capsys.readouterr().out.strip().endswith("(stopped early: the next run resumes)")
    for other in held:
        other.rollback()
        other.close()
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(TEXT))
    assert main([*HARVEST_ALL, "--db", str(db)]) == 0
    with JobStore(db) as s:
        assert s.count("sacct") == 7


def test_cli_harvests_into_the_configs_history_db_unless_db_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timer's unit names only the config: the harvest fills the [history] db the daemon, the
    guard and the nightly read (it filled /var/lib/slurm-harp/jobs.sqlite whatever they read)."""
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(TEXT))
    monkeypatch.delenv("HARP_DB", raising=False)
    site_db, given = tmp_path / "site" / "history.sqlite", tmp_path / "given.sqlite"
    site_db.parent.mkdir()
    config = tmp_path / "harp.toml"
    config.write_text(f'[history]\ndb = "{site_db}"\n')
    assert main([*HARVEST_ALL, "--config", str(config)]) == 0
    assert main([*HARVEST_ALL, "--config", str(config), "--db", str(given)]) == 0
    for db in (site_db, given):
        with JobStore(db) as s:
            assert s.count("sacct") == 7
    # without --config, the daemon's usual path when it exists
    site_db.unlink()
    # the default path is found where every optional --config finds it (commands.arguments)
    monkeypatch.setattr("slurm_harp.commands.arguments.DEFAULT_PATH", config)
    assert main(HARVEST_ALL) == 0
    with JobStore(site_db) as s:
        assert s.count("sacct") == 7


def test_cli_harvest_exits_2_on_a_config_that_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(RuntimeError("sacct must not run")))
    monkeypatch.delenv("HARP_DB", raising=False)
    config = tmp_path / "harp.toml"
    config.write_text("[history]\ndb = 3\n")
    with caplog.at_level(logging.ERROR):
        assert main(["harvest", "--config", str(config)]) == 2
    assert str(config) in caplog.text


def test_a_tagged_job_whose_ratio_raises_is_left_out_and_the_harvest_goes_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One stored job whose tag held a number of 400 digits made every `harp harvest`, and every
    nightly, end in an OverflowError traceback from the extension history (the windows were
    committed, the guard's file never written). Such a tag is no tag now (core.tag); anything
    else one record raises there is left out, counted and logged."""
    now = int(time.time())
    request = JobRequest(user_name="alice", time_limit_minutes=600, submit_time=now - 7200)
    tag = "harp:extend,t!=40,t0=600,v=x"
    jobs = [
        JobRecord(str(n), request, "COMPLETED", 3000, end_time=now - 3600, harp_tag=tag) for n in range(3)
    ]
    huge = dataclasses.replace(jobs[0], job_id="9", harp_tag=f"harp:extend,t!={'9' * 400},t0={'9' * 401},v=x")
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as s:
        s.merge([*jobs, huge], "saved")

    def ratio(record: JobRecord) -> float | None:
        if record.job_id == "1":
            raise ZeroDivisionError("a bug")
        return observed_ratio(record)

    monkeypatch.setattr(extension_file, "observed_ratio", ratio)  # as ratios_from imported it
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(HEADER_LINE))
    assert main(["harvest", "--db", str(db)]) == 0
    assert (
        "extension history: 1 tagged jobs left out, their ratio does not compute (job '1': Zero"
        in caplog.text
    )
    assert capsys.readouterr().out.strip().endswith(", 2 jobs in the extension history")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--start", "yesterday"], "not an ISO time"),
        # ISO, but before any Slurm time: said so (year 1 cannot even be a Unix time east of UTC)
        (["--start", "0001-01-01"], "--start: before 1970-01-01 UTC, when Slurm's times start: '0001-01-01'"),
        (["--start", "1969-12-31T23:59:59Z"], "--start: before 1970-01-01 UTC"),
        # It becomes the cursor, which a run then refuses (test_harvest_cursor.py)
        (["--start", "1999-12-31T23:59:59Z"], "--start: before 2000-01-01 UTC, older than any Slurm"),
        (["--overlap-minutes", "-5"], "--overlap-minutes: must be >= 0 and at most 5270400 (ten years)"),
        (["--settle-seconds", "nan"], "--settle-seconds: must be >= 0 and at most"),
        (
            ["--window-hours", "1e308"],
            "--window-hours: must be at least 0.01667 (60 s) and at most 87840 (ten years): '1e308'",
        ),
        (["--window-hours", "inf"], "--window-hours: must be at least 0.01667 (60 s)"),
        (["--window-hours", "0"], "--window-hours: must be at least 0.01667 (60 s)"),
        (["--overlap-minutes", "1e308"], "--overlap-minutes: must be >= 0"),
    ],
)
def test_cli_rejects_bad_arguments(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Taken, they would run no sacct and touch no store of this host's.
    monkeypatch.setenv("HARP_DB", str(tmp_path / "jobs.sqlite"))
    monkeypatch.setattr(sacct_module, "run_sacct", FakeSacct(RuntimeError("sacct must not run")))
    assert message in usage_error(["harvest", *args], capsys)


# ---- harp import -------------------------------------------------------------------------------


def test_source_names_are_file_stems() -> None:
    assert source_name("/x/KTH-SP2-1996-2.1-cln.swf.gz") == "KTH-SP2-1996-2.1-cln"
    assert source_name("eagle.csv") == "eagle" and source_name("march.sacct.txt") == "march.sacct"


def test_import_sacct_text_twice_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "cluster-a.txt"
    text.write_text(SACCT_TEXT)
    db = tmp_path / "jobs.sqlite"
    assert main(["import", "--db", str(db), str(text)]) == 0
    assert (
        "-> cluster-a: 18 lines, 7 jobs, 0 bad lines, 3 skipped, 7 new, 0 updated" in capsys.readouterr().out
    )
    with JobStore(db) as s:
        checksum = store_checksum(s)
    assert main(["import", "--db", str(db), "--source-name", "cluster-a", str(text)]) == 0
    with JobStore(db) as s:
        assert store_checksum(s) == checksum and s.sources() == ["cluster-a"]


def test_import_of_two_traces_sharing_job_keys_under_one_source_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two traces under one --source-name whose jobs share an id and submit time were merged into
    one row each, the second's values over the first's, said only as "2 updated"."""
    a, b, c = (tmp_path / name for name in ("a.swf", "b.swf", "c.swf"))
    a.write_text("; Version: 2.2\n1 0 10 3600 4 -1 -1 4 7200 -1 1 1 1 1 1 -1 -1 -1\n"
                 "2 5 10 60 4 -1 -1 4 7200 -1 1 1 1 1 1 -1 -1 -1\n")  # fmt: skip
    b.write_text("; Version: 2.2\n1 0 5 60 64 -1 -1 64 120 -1 0 2 2 2 2 -1 -1 -1\n"
                 "2 5 5 90 64 -1 -1 64 120 -1 0 2 2 2 2 -1 -1 -1\n")  # fmt: skip
    c.write_text(a.read_text())  # the same jobs again: nothing mixed
    db = str(tmp_path / "jobs.sqlite")
    with caplog.at_level(logging.WARNING):
        assert main(["import", "--db", db, str(a), str(b)]) == 0  # a source each: no clash
        assert main(["import", "--db", db, "--source-name", "one", str(a), str(c)]) == 0
        assert "jobs have the job id" not in caplog.text
        assert main(["import", "--db", db, "--source-name", "one", str(b)]) == 0  # another command
        assert "jobs have the job id" not in caplog.text
        assert main(["import", "--db", db, "--source-name", "two", str(a), str(c), str(b)]) == 0
    (line,) = [r.getMessage() for r in caplog.records if "jobs have the job id" in r.getMessage()]
    assert line.startswith(f"{b}: 2 jobs have the job id and submit time of jobs {c} gave under source 'two'")


def test_import_reports_missing_and_unreadable_files(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    assert main(["import", "--db", str(db), str(tmp_path / "nope.swf")]) == 2
    junk = tmp_path / "junk.txt"
    junk.write_text("not|a|sacct|header\n")
    assert main(["import", "--db", str(db), str(junk)]) == 1


def test_import_of_a_file_whose_every_line_is_bad_exits_1(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Random bytes named .swf read as so many bad lines and no job: the import said so in its count
    and exited 0, as if the file had been read."""
    db, noise = tmp_path / "jobs.sqlite", tmp_path / "noise.swf"
    noise.write_bytes(bytes(range(256)) * 40)
    assert main(["import", "--db", str(db), str(noise)]) == 1
    assert f"{noise}: no job read, every line bad" in caplog.text
    comments = tmp_path / "empty.swf"
    comments.write_text("; MaxProcs: 8\n")
    assert main(["import", "--db", str(db), str(comments)]) == 0  # no job, but no bad line either


def test_import_of_saved_text_forges_no_job_and_says_what_it_did_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The audit's file: alice's work dir "d\\n<a whole row>" in text saved by `sacct -P`. Imported,
    it stored job 987654 of victim (UID 4242) with a harp tag of alice's choosing, and counted
    alice's job as one bad line. Saved with a random delimiter and imported with it, it reads."""
    header, line = SACCT_TEXT.split("\n")[:2]
    values = dict(zip(SACCT_FIELDS, line.split("|"), strict=True))
    fake = {**values, "JobIDRaw": "987654", "JobID": "987654", "User": "victim", "UID": "4242"}
    fake["AdminComment"] = "harp:extend,t!=1,t0=100000,v=forged"
    work_dir = "/home/alice/d\n" + "|".join(fake[name] for name in SACCT_FIELDS[:-1])
    rows = {**values, "WorkDir": work_dir}
    saved, random = tmp_path / "saved.txt", tmp_path / "random.txt"
    saved.write_text(header + "\n" + "|".join(rows[name] for name in SACCT_FIELDS) + "\n")
    sep = "\x1f9b2c4e7a0d13f5c8\x1f"
    random.write_text(header.replace("|", sep) + "\n" + sep.join(rows[name] for name in SACCT_FIELDS) + "\n")
    db = tmp_path / "jobs.sqlite"
    assert main(["import", "--db", str(db), str(saved)]) == 1  # no job read: said, exit 1
    assert "saved.txt -> saved: 2 lines, 0 jobs, 2 bad lines" in capsys.readouterr().out
    assert "saved.txt:2: 26 fields, header has 27: a row split over lines" in caplog.text
    assert main(["import", "--db", str(db), "--delimiter", sep, str(random)]) == 0
    with JobStore(db) as s:
        (job,) = s.records()
    assert (job.job_id, job.request.user_name, job.harp_tag) == (
        "1001",
        "alice",
        last_tag(values["AdminComment"]),
    )
    assert job.request.work_dir == bounded_text(work_dir)


def test_train_reads_saved_text_with_its_random_delimiter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`harp train --source FILE` had no --delimiter: a file saved with a random one could not be
    trained from, only split on its header's guessable delimiter after `harp import`."""
    header, line = SACCT_TEXT.split("\n")[:2]
    values = dict(zip(SACCT_FIELDS, line.split("|"), strict=True))
    work_dir = "/home/alice/d\n" + "|".join(values[name] for name in SACCT_FIELDS[:-1])
    sep = "\x1f9b2c4e7a0d13f5c8\x1f"
    saved = tmp_path / "random.txt"
    rows = {**values, "WorkDir": work_dir}
    saved.write_text(header.replace("|", sep) + "\n" + sep.join(rows[name] for name in SACCT_FIELDS) + "\n")
    (job,), stats = train_command.read_source(str(saved), "", None, sep)
    assert (job.job_id, job.request.user_name, job.request.work_dir) == (
        "1001",
        "alice",
        bounded_text(work_dir),
    )
    assert stats.bad_lines == 0 and "read it with --delimiter" not in caplog.text
    plain = tmp_path / "plain.txt"
    plain.write_text(SACCT_TEXT)
    with caplog.at_level(logging.WARNING):
        train_command.read_source(str(plain), "")
    assert f"{plain}: saved sacct text split by its header's delimiter" in caplog.text


def test_train_refuses_a_delimiter_it_would_not_use(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Given with --db or --source sacct, --delimiter was ignored without a word."""
    sep = "\x1f9b2c4e7a0d13f5c8\x1f"
    db = tmp_path / "jobs.sqlite"
    JobStore(db).close()
    for source in (["--db", str(db)], ["--source", "sacct"]):
        assert main(["train", *source, "--delimiter", sep, "--store", str(tmp_path / "m")]) == 2
    assert "--delimiter is for a saved sacct text file given to --source, not sacct" in caplog.text


@pytest.mark.parametrize("delimiter", ["|", "\x1f", "#::#", "short\nline"])
@pytest.mark.parametrize("command", ["import", "train"])
def test_a_delimiter_a_user_could_guess_is_refused(
    command: str, delimiter: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = ["--source", "x.txt"] if command == "train" else ["x.txt"]
    assert "--delimiter: must be the random string of at least 8 characters" in usage_error(
        [command, "--delimiter", delimiter, *source], capsys
    )


def test_file_and_source_names_not_utf8_are_stored_with_question_marks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A file named b"\\xff.txt" (or --source-name b"\\xfe") ended the import in a
    UnicodeEncodeError: SQLite stores no surrogate, and the files after it were not imported. Its
    source key is "?" now (core.text's rule, as MariaDB stores such a byte of a job's name), said so,
    and the name is printed escaped, not a UnicodeEncodeError of a strict stdout."""
    odd, plain = tmp_path / os.fsdecode(b"\xff.txt"), tmp_path / "plain.txt"
    odd.write_text(SACCT_TEXT)
    plain.write_text(SACCT_TEXT)
    db = tmp_path / "jobs.sqlite"
    assert main(["import", "--db", str(db), str(odd), str(plain)]) == 0
    assert "\\udcff.txt -> ?: 18 lines, 7 jobs" in capsys.readouterr().out
    assert "source name '\\udcff' is not UTF-8: its jobs are stored under '?'" in caplog.text
    assert main(["import", "--db", str(db), "--source-name", os.fsdecode(b"a\xfe"), str(plain)]) == 0
    with JobStore(db, readonly=True) as s:
        assert s.sources() == ["?", "a?", "plain"] and s.count() == 21


def test_import_names_a_damaged_or_locked_store_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A store locked while importing said `cannot import a.txt: database is locked`, blaming the
    file, and went on to fail every later file the same way."""
    text = tmp_path / "a.txt"
    text.write_text(SACCT_TEXT)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with caplog.at_level(logging.ERROR):
        assert main(["import", "--db", str(junk), str(text)]) == 2
    assert f"nothing imported: the job store {junk} is damaged or no SQLite database" in caplog.text
    db = tmp_path / "jobs.sqlite"
    JobStore(db).close()
    monkeypatch.setattr(jobstore_module, "LOCK_WAIT_S", 0.1)
    held: list[sqlite3.Connection] = []

    def locking(path: str, stats: ReadStats, *, delimiter: str | None = None) -> list[JobRecord]:
        held.append(_lock(db))  # another writer takes the store while the file is read
        return load_records(path, stats, delimiter=delimiter)

    monkeypatch.setattr(importer, "load_records", locking)
    with caplog.at_level(logging.ERROR):
        assert main(["import", "--db", str(db), str(text), str(text)]) == 1
    assert f"import stopped: the job store {db} is locked: another writer" in caplog.text
    assert f"; {text} and the files after it are not imported (import them again then: " in caplog.text
    assert len(held) == 1 and "cannot import" not in caplog.text
    held[0].close()


def test_import_into_another_programs_sqlite_file_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It was given the store's tables and switched to WAL, exit 0."""
    app = tmp_path / "app.sqlite"
    with sqlite3.connect(app) as db:
        db.execute("CREATE TABLE settings (k TEXT PRIMARY KEY, v TEXT)")
    db.close()
    before = app.read_bytes()
    assert main(["import", "--db", str(app), str(BUNDLED_TRACE)]) == 2
    assert f"nothing imported: {app}: not a job store made by harp (no such table: meta)\n" in caplog.text
    assert app.read_bytes() == before


def test_saved_text_imported_over_the_harvested_range_is_trained_on_once(
    tmp_path: Path, local_zone: Callable[[str], None], caplog: pytest.LogCaptureFixture
) -> None:
    """The audit's p10: the harvest's 7 jobs and the same 7 saved by `sacct -P` and imported are
    14 rows under two sources, and training read 14."""
    local_zone("UTC")  # the zone the saved text was printed in, as this host reads it
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as s:
        _harvest(s, FakeSacct(TEXT), source="sacct")
    saved = tmp_path / "march.txt"
    saved.write_text(SACCT_TEXT)
    assert main(["import", "--db", str(db), str(saved)]) == 0
    with JobStore(db, readonly=True) as s:
        records = list(s.records())
        assert len(records) == 14 and s.sources() == ["march", "sacct"]
    assert len({(r.job_id, r.request.submit_time) for r in records}) == 7  # the same 7 jobs
    assert len(build_dataset(records)) == 7
    assert "7 jobs are held twice" in caplog.text


def test_import_reads_a_carriage_return_in_a_job_name_as_the_harvest_does(
    tmp_path: Path, local_zone: Callable[[str], None]
) -> None:
    """sacct prints a "\\r" in a job name as it is. `harp import` read saved text with universal
    newlines: the "\\r" ended a line, and that row and every row after it were bad lines (no job of
    7 read), where the harvest, splitting at "\\n" alone, read every job. A CRLF's "\\r" is no field's."""
    local_zone("UTC")  # the zone the saved text was printed in, as this host reads it
    text = SACCT_TEXT.replace("|relax|", "|re\rlax|")
    with JobStore(tmp_path / "harvested.sqlite") as s:
        _harvest(s, FakeSacct(text.replace("|", US)), source="saved")
        harvested = list(s.records())
    assert len(harvested) == 7 and [r.request.job_name for r in harvested].count("re\rlax") == 1
    for name, line_end in (("lf", "\n"), ("crlf", "\r\n")):
        saved = tmp_path / name / "saved.txt"
        saved.parent.mkdir()
        saved.write_bytes(text.replace("\n", line_end).encode())
        db = saved.with_suffix(".sqlite")
        assert main(["import", "--db", str(db), str(saved)]) == 0
        with JobStore(db) as s:
            assert list(s.records()) == harvested, name


def test_import_the_kth_trace_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "jobs.sqlite"
    assert main(["import", "--db", str(db), str(BUNDLED_TRACE)]) == 0
    with JobStore(db) as s:
        assert s.sources() == ["KTH-SP2-1996-2.1-cln"] and s.count() > 28_000
    assert "28468 new" in capsys.readouterr().out


@pytest.mark.parametrize("guess", [US, "|"])  # the harvester's delimiter before, and sacct's default
def test_a_work_dir_holding_a_row_of_its_own_forges_no_job(store: JobStore, guess: str) -> None:
    """A user names their work dir "d\\n<a whole row>" (every column but Flags, which sacct prints
    after it) split by the delimiter they expect: it stays their work dir, never a job of another user
    with a harp tag of their choosing (on Slurm: tests/e2e/test_forged_rows_e2e.py)."""
    header, line = SACCT_TEXT.split("\n")[:2]
    values = dict(zip(SACCT_FIELDS, line.split("|"), strict=True))
    fake = {**values, "JobIDRaw": "987654", "JobID": "987654", "User": "victim", "UID": "4242"}
    fake["AdminComment"] = "harp:extend,t!=1,t0=100000,v=forged"
    work_dir = "/home/alice/d\n" + guess.join(fake[name] for name in SACCT_FIELDS[:-1])
    sep = "\x1e"  # stands for whatever delimiter the harvester gives sacct
    row = sep.join({**values, "WorkDir": work_dir}[name] for name in SACCT_FIELDS)
    text = header.replace("|", sep) + "\n" + row + "\n"
    report = _harvest(store, lambda argv: delimited(text, argv, sep), start=NOW - 2 * DAY)
    (record,) = store.records("c1")
    assert report.inserted == 1 and record.job_id == "1001" and record.request.user_name == "alice"
    # Cut as every string of a job is (core.text), the plugin's too.
    assert record.request.work_dir == bounded_text(work_dir), (record.request.work_dir, work_dir)
    assert record.harp_tag == last_tag(values["AdminComment"])
