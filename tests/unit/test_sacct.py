from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TypedDict

import lightgbm
import numpy as np
import pytest

from slurm_harp.accounting import SACCT_FIELDS, JobRecord, ReadStats, harvest_sacct, load_records, read_sacct
from slurm_harp.accounting.fields import SLURM_ZONE
from slurm_harp.accounting.sacct_runner import decode_output, run_sacct
from slurm_harp.cli import main
from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.learning.dataset import build_dataset
from slurm_harp.slurm_formats import parse_tres
from tests.conftest import delimited

HEADER = "|".join(SACCT_FIELDS)


def _with_admin_comment(line: str) -> str:
    """``line`` (fields as in SACCT_FIELDS without AdminComment and NTasks) with both: AdminComment
    after ExitCode, NTasks after NNodes (a step's: one task per node; none on a job line)."""
    fields = line.split("|")
    at = SACCT_FIELDS.index("AdminComment")
    fields = [*fields[:at], TAG_1001 if line.startswith("1001|") else "", *fields[at:]]
    nnodes = SACCT_FIELDS.index("NNodes")
    tasks = fields[nnodes] if "." in fields[0] else ""
    return "|".join([*fields[: nnodes + 1], tasks, *fields[nnodes + 1 :]])


# What `sacct -a -P --noconvert -o <SACCT_FIELDS>` prints on Slurm 22.05: a job line, then its steps.
SACCT_TEXT = (
    HEADER
    + """
1001|1001|relax|alice|1000|phys|batch|normal|COMPLETED|0:0|3600|120|8000M||8|8|2|2|1-02:03:04|billing=8,cpu=8,gres/gpu=4,mem=8000M,node=2|2024-03-01T09:55:00|2024-03-01T10:00:00|2024-03-01T11:00:00|/home/alice/run1|SchedMain
1001.batch|1001.batch|batch||||||COMPLETED|0:0|3600|||2048000|4|4|1|1|00:30:00||2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00||
1001.extern|1001.extern|extern||||||COMPLETED|0:0|3600|||1000K|8|8|2|2|00:00.004||2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T11:00:00||
1001.0|1001.0|pw.x||||||COMPLETED|0:0|3500|||3G|8|8|2|2|1-01:33:03||2024-03-01T10:00:10|2024-03-01T10:00:10|2024-03-01T10:58:30||
1002|1002|long|bob|1001|chem|batch|normal|TIMEOUT|0:0|3605|60|4000M||4|4|1|1|02:03.123|billing=4,cpu=4,mem=4000M,node=1|2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:05:05|/home/bob|SchedBackfill
1002.batch|1002.batch|batch||||||CANCELLED|0:15|3605|||512M|4|4|1|1|02:03.123||2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:05:05||
1003|1003|oops|carol|1002|phys|debug|normal|CANCELLED by 1002|0:0|100|Partition_Limit|1000M||1|1|1|1|00:01.500|billing=1,cpu=1,mem=1000M,node=1|2024-03-01T10:10:00|2024-03-01T10:10:00|Unknown|/tmp|
1004|1004|still|alice|1000|phys|batch|normal|RUNNING|0:0|500|120|8000M||8|8|1|1|00:00:00|billing=8,cpu=8,mem=8000M,node=1|2024-03-01T10:20:00|2024-03-01T10:20:00|Unknown|/home/alice|
1004.batch|1004.batch|batch||||||RUNNING|0:0|500||||8|8|1|1|00:00:00||2024-03-01T10:20:00|2024-03-01T10:20:00|Unknown||
1010|1005_4|arr|dave|1003|bio|batch|normal|COMPLETED|0:0|60|30|2000M||2|2|1|1|00:01:00|billing=2,cpu=2,mem=2000M,node=1|2024-03-01T10:30:00|2024-03-01T10:31:00|2024-03-01T10:32:00|/home/dave|
1010.batch|1005_4.batch|batch||||||COMPLETED|0:0|60|||100M|2|2|1|1|00:01:00||2024-03-01T10:31:00|2024-03-01T10:31:00|2024-03-01T10:32:00||
1005|1005_[5-9%2]|arr|dave|1003|bio|batch|normal|PENDING|0:0|0|30|2000M||2|0|1|1|00:00:00|billing=2,cpu=2,mem=2000M,node=1|2024-03-01T10:30:00|Unknown|Unknown|/home/dave|
1020|1020+0|het|erin|1004|phys|batch|normal|COMPLETED|0:0|200|UNLIMITED|1000M||1|1|1|1|00:03:00|billing=1,cpu=1,mem=1000M,node=1|2024-03-01T11:00:00|2024-03-01T11:00:00|2024-03-01T11:03:20|/home/erin|
1020.batch|1020+0.batch|batch||||||COMPLETED|0:0|200|||20M|1|1|1|1|00:03:00||2024-03-01T11:00:00|2024-03-01T11:00:00|2024-03-01T11:03:20||
1021|1020+1|het|erin|1004|phys|gpu|normal|COMPLETED|0:0|200|UNLIMITED|1000M||1|1|1|1|00:02:00|billing=1,cpu=1,gres/gpu:a100=2,mem=1000M,node=1|2024-03-01T11:00:00|2024-03-01T11:00:00|2024-03-01T11:03:20|/home/erin|
1030|1030|hog|frank|1005|chem|batch|long|OUT_OF_MEMORY|0:125|42|600|2Gc||4|4|1|1|00:02:40|billing=4,cpu=4,mem=8G,node=1|2024-03-01T12:00:00|2024-03-01T12:00:00|2024-03-01T12:00:42|/home/frank|
1030.batch|1030.batch|batch||||||OUT_OF_MEMORY|0:125|42|||8G|4|4|1|1|00:02:40||2024-03-01T12:00:00|2024-03-01T12:00:00|2024-03-01T12:00:42||
1040|1040|instant|alice|1000|phys|batch|normal|FAILED|1:0|0|10|100M||1|1|1|1|00:00:00|billing=1,cpu=1,mem=100M,node=1|2024-03-01T12:10:00|2024-03-01T12:10:00|2024-03-01T12:10:00|/home/alice|
"""  # noqa: E501
)
# Every line gains AdminComment after ExitCode (job 1001 carries a harp tag after another tool's
# token) and NTasks after NNodes.
TAG_1001 = "backup:ok harp:shadow,t=45/q0.9,v=20240301T000000.000000Z"
SACCT_TEXT = "\n".join(
    _line if not _line or _line.startswith("JobIDRaw") else _with_admin_comment(_line)
    for _line in SACCT_TEXT.split("\n")
)

BAD_LINES = """\
1051|1051|bad|alice|1000|phys|batch|normal|COMPLETED|0:0||abc|10|100M||1|1|1|1|00:00:01|billing=1|2024-03-01T12:10:00|2024-03-01T12:10:00|2024-03-01T12:10:01|/home/alice|
x1052|x1052|badid|alice|1000|phys|batch|normal|COMPLETED|0:0||5|10|100M||1|1|1|1|00:00:01|billing=1|2024-03-01T12:10:00|2024-03-01T12:10:00|2024-03-01T12:10:05|/home/alice|
1053|1053|badmem|alice|1000|phys|batch|normal|COMPLETED|0:0||5|10|lots||1|1|1|1|00:00:01|billing=1|2024-03-01T12:10:00|2024-03-01T12:10:00|2024-03-01T12:10:05|/home/alice|
1050|1050|short|alice|1000|phys|batch|normal|COMPLETED
"""  # the last line cut short; one followed by others: tests/unit/test_sacct_lines.py
# NTasks after NNodes, as in SACCT_TEXT (the short line has no such column).
BAD_LINES = "".join(
    "|".join([*f[: SACCT_FIELDS.index("NNodes") + 1], "", *f[SACCT_FIELDS.index("NNodes") + 1 :]]) + "\n"
    if len(f := line.split("|")) > SACCT_FIELDS.index("NNodes")
    else line + "\n"
    for line in BAD_LINES.splitlines()
)


def _local(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


class Parsed(TypedDict):
    stats: ReadStats
    by_id: dict[str, JobRecord]


@pytest.fixture()
def records() -> Parsed:
    stats = ReadStats(source="fixture")
    out = read_sacct(SACCT_TEXT.splitlines(), stats)
    return {"stats": stats, "by_id": {r.job_id: r for r in out}}


def test_finished_jobs_become_records_and_steps_fold_in(records: Parsed) -> None:
    by_id = records["by_id"]
    stats = records["stats"]
    assert sorted(by_id) == ["1001", "1002", "1003", "1010", "1020", "1021", "1030"]
    assert stats.bad_lines == 0
    # RUNNING 1004, PENDING array 1005_[5-9], zero-elapsed 1040 are skipped, not errors.
    assert stats.skipped == 3
    assert stats.records == 7


def test_job_fields(records: Parsed) -> None:
    job = records["by_id"]["1001"]
    request = job.request
    assert (request.user_name, request.user_id, request.account) == ("alice", 1000, "phys")
    assert (request.partition, request.qos, request.job_name) == ("batch", "normal", "relax")
    assert request.work_dir == "/home/alice/run1"
    assert request.time_limit_minutes == 120
    assert request.mem_per_node_mb == 4000  # 8000M for the job over 2 nodes
    assert request.mem_per_cpu_mb is None
    assert (request.min_cpus, request.min_nodes, request.gpus_per_node) == (8, 2, 2)
    assert request.is_array is False
    assert request.submit_time == _local("2024-03-01T09:55:00")
    assert job.start_time == _local("2024-03-01T10:00:00")
    assert job.end_time == _local("2024-03-01T11:00:00")
    assert job.state == "COMPLETED" and not job.censored
    assert job.elapsed_s == 3600 and job.alloc_cpus == 8
    # MaxRSS: bare number = bytes, K/M/G suffixes binary; the job's value is the max over steps.
    assert job.max_rss_mb == pytest.approx(3 * 1024)
    assert job.total_cpu_s == pytest.approx(86400 + 2 * 3600 + 3 * 60 + 4)


def test_states_censoring_and_sentinels(records: Parsed) -> None:
    by_id = records["by_id"]
    timeout = by_id["1002"]
    assert timeout.state == "TIMEOUT" and timeout.censored
    assert timeout.total_cpu_s == pytest.approx(123.123)
    assert timeout.max_rss_mb == pytest.approx(512)
    cancelled = by_id["1003"]
    assert cancelled.state == "CANCELLED" and not cancelled.censored
    assert cancelled.request.time_limit_minutes is None  # Partition_Limit
    assert cancelled.end_time is None  # Unknown
    assert cancelled.max_rss_mb is None  # no steps
    oom = by_id["1030"]
    assert oom.state == "OUT_OF_MEMORY" and oom.censored
    assert oom.request.mem_per_cpu_mb == 2048 and oom.request.mem_per_node_mb is None
    assert by_id["1020"].request.time_limit_minutes is None  # UNLIMITED


def test_array_and_het_ids(records: Parsed) -> None:
    by_id = records["by_id"]
    task = by_id["1010"]
    assert task.request.is_array is True
    assert task.max_rss_mb == pytest.approx(100)
    het0, het1 = by_id["1020"], by_id["1021"]
    assert het0.request.is_array is False and het1.request.is_array is False
    assert het0.max_rss_mb == pytest.approx(20)
    assert het1.request.partition == "gpu"
    assert het1.request.gpus_per_node == 2  # typed gres/gpu:a100=2


def test_bad_lines_are_counted_and_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    stats = ReadStats(source="bad.txt")
    with caplog.at_level(logging.WARNING):
        out = read_sacct((SACCT_TEXT + BAD_LINES).splitlines(), stats)
    assert len(out) == 7
    assert stats.bad_lines == 4
    first_bad = len(SACCT_TEXT.splitlines()) + 1
    assert f"bad.txt:{first_bad}:" in caplog.text
    assert "bad job id" in caplog.text and "bad size" in caplog.text
    assert len(stats.first_errors) == 4


def test_trailing_delimiter_of_sacct_p_is_accepted() -> None:
    lines = [line + "|" for line in SACCT_TEXT.splitlines()]
    stats = ReadStats()
    assert len(read_sacct(lines, stats)) == 7
    assert stats.bad_lines == 0


def test_header_is_required() -> None:
    with pytest.raises(ValueError, match="header"):
        read_sacct(["1001|1001|x|COMPLETED"])
    with pytest.raises(ValueError, match="no sacct header"):
        read_sacct([])


def test_a_header_repeating_a_column_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Each name kept one index, one short of the fields: `harp import` crashed with IndexError."""
    with pytest.raises(ValueError, match="repeats the column State: "):
        read_sacct(
            ["JobIDRaw|JobID|State|ElapsedRaw|End|State", "100|100|COMPLETED|60|2024-03-01T10:00:00|C"]
        )
    (tmp_path / "dup.txt").write_text("JobIDRaw|JobName|State|ElapsedRaw|JobName|State\n")
    (tmp_path / "good.txt").write_text(SACCT_TEXT)
    files = [str(tmp_path / name) for name in ("dup.txt", "good.txt")]
    assert main(["import", "--db", str(tmp_path / "jobs.sqlite"), *files]) == 1
    assert "sacct header repeats the column JobName, State" in caplog.text
    assert "good.txt -> good: 18 lines, 7 jobs" in capsys.readouterr().out  # the next file is imported


def test_columns_are_found_by_name_in_any_order() -> None:
    text = "State|ElapsedRaw|JobID|TimelimitRaw\nCOMPLETED|30|77|5\nCOMPLETED|10|77.batch|\n"
    (record,) = read_sacct(text.splitlines())
    assert (record.job_id, record.elapsed_s, record.request.time_limit_minutes) == ("77", 30, 5)
    assert record.max_rss_mb is None and record.request.user_name is None


def test_tres() -> None:
    assert parse_tres("billing=4,cpu=4,gres/gpu=2,mem=8G,node=1")["gres/gpu"] == "2"
    assert parse_tres("") == {}
    with pytest.raises(ValueError):
        parse_tres("cpu4")


def test_harvest_runs_sacct_through_the_runner() -> None:
    calls: list[list[str]] = []

    def fake_runner(argv: Sequence[str]) -> str:
        calls.append(list(argv))
        return delimited(SACCT_TEXT, argv)

    out = harvest_sacct(fake_runner, "2024-03-01", None)
    assert len(out) == 7
    argv, steps = calls  # the window, then its jobs' steps by id (test_harvest)
    assert steps[steps.index("-j") + 1] == "1001,1002,1003,1010,1020,1021,1030" and "-S" not in steps
    assert argv[0] == "sacct"
    assert {"-a", "-P", "--noconvert"} <= set(argv)
    assert argv[argv.index("-S") + 1] == "2024-03-01"
    assert argv[argv.index("-E") + 1] == "now"
    assert argv[argv.index("-o") + 1] == ",".join(SACCT_FIELDS)
    harvest_sacct(fake_runner, "now-7days", "2024-03-02")
    assert calls[2][calls[2].index("-E") + 1] == "2024-03-02"


def test_load_records_reads_sacct_text_files(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "accounting.txt"
    path.write_text(SACCT_TEXT + BAD_LINES)
    stats = ReadStats()
    assert len(load_records(path, stats)) == 7
    assert stats.bad_lines == 4


def test_sacct_output_that_is_not_utf8_is_read_and_each_line_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One job name in Latin-1 used to stop the harvester for good (strict decoding)."""
    latin1 = SACCT_TEXT.replace("|relax|", "|caf\u00e9|").encode("latin-1")
    fake = tmp_path / "sacct"
    fake.write_bytes(b"#!/bin/sh\ncat " + str(tmp_path / "out").encode() + b"\n")
    fake.chmod(0o755)
    (tmp_path / "out").write_bytes(latin1)
    with caplog.at_level(logging.WARNING):
        text = run_sacct([str(fake), "-a"])
    out = {r.job_id: r for r in read_sacct(text.split("\n"))}
    assert len(out) == 7
    assert out["1001"].request.job_name == "caf?"  # as the plugin sends it, and MariaDB stores it
    (logged,) = [r.getMessage() for r in caplog.records]
    assert "line 2 is not UTF-8" in logged and "caf\\xe9" in logged
    assert decode_output(b"plain\n", "sacct") == "plain\n"


def test_a_saved_sacct_file_that_is_not_utf8_is_read_as_the_harvest_reads_sacct(tmp_path: Path) -> None:
    """`harp import`: the same names as a harvest of the same bytes (before: U+FFFD against "?")."""
    data = SACCT_TEXT.replace("|relax|", "|caf\u00e9|").encode("latin-1")
    data = data.replace(b"|long|", b"|\xf0\x9f\x98|")  # a truncated emoji
    (tmp_path / "saved.txt").write_bytes(data)
    loaded = {r.job_id: r.request.job_name for r in load_records(tmp_path / "saved.txt")}
    harvested = {r.job_id: r.request.job_name for r in read_sacct(decode_output(data, "sacct").split("\n"))}
    assert loaded == harvested and loaded["1001"] == "caf?" and loaded["1002"] == "???"


def test_a_failing_sacct_names_its_exit_code_and_stderr(tmp_path: Path) -> None:
    fake = tmp_path / "sacct"
    fake.write_bytes(b"#!/bin/sh\necho 'sacct: error: slurmdbd: \xff down' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"exited 1: sacct: error: slurmdbd: \ufffd down"):
        run_sacct([str(fake)])


def test_the_last_harp_tag_of_the_admin_comment_is_kept(records: Parsed) -> None:
    assert records["by_id"]["1001"].harp_tag == "harp:shadow,t=45/q0.9,v=20240301T000000.000000Z"
    assert records["by_id"]["1002"].harp_tag is None


def test_sacct_runs_in_utc_with_the_rest_of_the_environment_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sacct prints and reads times in its process's zone: local time repeats an hour when clocks
    go back, so run_sacct runs it in UTC; SLURM_CONF and the rest still reach it."""
    fake = tmp_path / "sacct"
    fake.write_text('#!/bin/sh\necho "$TZ|$SLURM_CONF|$(date -d @0 +%H:%M)"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("TZ", "Europe/Berlin")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/other.conf")
    assert run_sacct([str(fake)]) == "UTC0|/etc/slurm/other.conf|00:00\n"


def test_times_are_read_in_the_zone_sacct_printed_them_in(local_zone: Callable[[str], None]) -> None:
    """A runner's output (harvest_sacct) is UTC; a saved file is read in this host's zone."""
    local_zone("Asia/Kolkata")
    (from_runner,) = [
        r for r in harvest_sacct(lambda argv: delimited(SACCT_TEXT, argv), "2024-03-01") if r.job_id == "1030"
    ]
    (from_file,) = [r for r in read_sacct(SACCT_TEXT.splitlines()) if r.job_id == "1030"]
    end = int(datetime.fromisoformat("2024-03-01T12:00:42+00:00").timestamp())
    assert from_runner.end_time == end
    assert from_file.end_time == end - 5 * 3600 - 1800  # 12:00:42 in Kolkata, UTC+5:30


def test_a_finished_job_from_the_future_is_a_bad_line(caplog: pytest.LogCaptureFixture) -> None:
    # A controller whose clock ran years ahead: such a job would stay the newest submission of the
    # store for years, and every later challenger would be judged on no job new to its champion.
    now = _local("2024-03-01T13:00:00")
    ahead = SACCT_TEXT.replace("2024-03-01T12:00:", "2031-03-01T12:00:")  # job 1030's times
    stats = ReadStats(source="ahead.txt")
    with caplog.at_level(logging.WARNING):
        out = read_sacct(ahead.splitlines(), stats, now=now)
    assert "1030" not in {r.job_id for r in out} and len(out) == 6
    assert stats.bad_lines == 1
    assert "Submit 2031-03-01T12:00:00 is in the future" in caplog.text
    # A day's slack: a saved file read in another zone than it was written in still reads.
    assert len(read_sacct(SACCT_TEXT.splitlines(), now=now - 20 * 3600)) == 7
    assert len(read_sacct(SACCT_TEXT.splitlines(), now=_local("2024-02-28T00:00:00"))) < 7


def test_the_steps_of_a_bad_job_line_join_no_other_record_of_its_id() -> None:
    # With --duplicates an id has one job line per record (a requeued job's runs). The second
    # record's job line is bad (from the future): its 64G step used to join the first record.
    now = _local("2024-03-01T13:00:00")
    job = [line for line in SACCT_TEXT.splitlines() if line.startswith("1030")]
    again = [line.replace("2024-03-01T12:00:", "2031-03-01T12:00:").replace("|8G|", "|64G|") for line in job]
    stats = ReadStats(source="requeued.txt")
    out = read_sacct([SACCT_TEXT.splitlines()[0], *job, *again], stats, now=now)
    assert [r.job_id for r in out] == ["1030"] and stats.bad_lines == 1
    assert out[0].max_rss_mb == 8192


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("NNodes", "-2", "bad count '-2'"),
        ("ReqNodes", "-2", "bad count '-2'"),
        ("ReqCPUS", "1_000", "bad count '1_000'"),
        ("UID", "+1000", "bad count '+1000'"),
        ("ElapsedRaw", "\u0661\u0660", "bad count '\u0661\u0660'"),
        ("ReqTRES", "cpu=1,gres/gpu=-2,node=1", "bad count '-2'"),
        ("JobIDRaw", "\u0661\u0660\u0664\u0660", "bad job id '\u0661\u0660\u0664\u0660'"),
    ],
    ids=[
        "NNodes=-2",
        "ReqNodes=-2",
        "ReqCPUS=1_000",
        "UID=+1000",
        "ElapsedRaw-arabic-indic",
        "gpu=-2",
        "JobIDRaw-arabic-indic",
    ],
)
def test_a_count_sacct_never_prints_is_a_bad_line(
    caplog: pytest.LogCaptureFixture, field: str, value: str, said: str
) -> None:
    """sacct's counts and job ids are ASCII digits. int() and \\d read more: NNodes=-2 was stored as
    -2 nodes with a negative memory per node and GPU count; job "١٠٤٠" as a job apart from 1040."""
    line = next(x for x in SACCT_TEXT.splitlines() if x.startswith("1040|")).split("|")
    line[SACCT_FIELDS.index(field)] = value
    stats = ReadStats(source="odd.txt")
    with caplog.at_level(logging.WARNING):
        out = read_sacct([HEADER, "|".join(line)], stats)
    assert out == [] and stats.bad_lines == 1
    assert f"bad line odd.txt:2: {said}" in caplog.text


NO_VAL, INFINITE = "4294967294", "4294967295"  # slurm.h's 32-bit "no value" and "no limit"
NO_VAL64, INFINITE64 = str(2**64 - 2), str(2**64 - 1)


def _job_1001_with(field: str, value: str, **more: str) -> tuple[list[JobRecord], ReadStats]:
    """Job 1001 (8 CPUs asked, 2 nodes, 8000M, 4 GPUs) and its steps, ``field`` set to ``value``
    on its job line; read as the harvest reads it (in UTC)."""
    lines = [line for line in SACCT_TEXT.splitlines() if line.startswith("1001")]
    fields = lines[0].split("|")
    for name, text in {field: value, **more}.items():
        fields[SACCT_FIELDS.index(name)] = text
    stats = ReadStats(source="sentinel.txt")
    return read_sacct([HEADER, "|".join(fields), *lines[1:]], stats, zone=SLURM_ZONE), stats


@pytest.mark.parametrize(
    ("field", "value", "read"),
    [
        ("ReqCPUS", NO_VAL, {"min_cpus": None, "min_nodes": 2, "mem_per_node_mb": 4000}),
        ("ReqNodes", NO_VAL, {"min_cpus": 8, "min_nodes": 2, "mem_per_node_mb": 4000}),  # NNodes'
        ("ReqNodes", NO_VAL64, {"min_nodes": 2, "mem_per_node_mb": 4000, "gpus_per_node": 2}),
        ("TimelimitRaw", INFINITE, {"time_limit_minutes": None}),  # as UNLIMITED
        ("TimelimitRaw", NO_VAL, {"time_limit_minutes": None}),  # as Partition_Limit
        ("AllocCPUS", INFINITE64, {"alloc_cpus": None}),
        ("ReqTRES", f"cpu=8,gres/gpu={NO_VAL},node=2", {"gpus_per_node": None}),
        ("ReqTRES", f"cpu=8,gres/gpu:a100=2,gres/gpu:v100={NO_VAL64},node=2", {"gpus_per_node": None}),
        # sacct prints a size as a double: NO_VAL64 is 2**64, the ReqMem of a job cancelled before
        # slurmctld gave it memory (held, or pending, with no --mem; seen on Slurm 22.05).
        ("ReqMem", "18446744073709551616.00M", {"mem_per_node_mb": None, "mem_per_cpu_mb": None}),
        ("ReqMem", "18446744073709551616.00Mc", {"mem_per_node_mb": None, "mem_per_cpu_mb": None}),
    ],
)
def test_slurms_no_value_in_a_count_is_read_as_unknown(
    field: str, value: str, read: dict[str, object]
) -> None:
    """Slurm prints its NO_VAL / INFINITE counters as numbers in some fields and releases. Read as
    counts, ReqCPUS=4294967294 was stored as that many CPUs, and ReqNodes=4294967294 as that many
    nodes of 1 MB each; the 64-bit ones made the line bad (number out of range). Unknown is what
    the module makes of "Unknown" or a blank in the same field: ReqNodes falls back to NNodes."""
    out, stats = _job_1001_with(field, value)
    assert stats.bad_lines == 0 and [r.job_id for r in out] == ["1001"]
    job = out[0]
    got = {name: getattr(job if name == "alloc_cpus" else job.request, name) for name in read}
    assert got == read


@pytest.mark.parametrize("value", [NO_VAL, INFINITE64])
def test_slurms_no_value_as_elapsed_leaves_the_job_unused_as_an_unknown_does(value: str) -> None:
    out, stats = _job_1001_with("ElapsedRaw", value)
    assert out == [] and stats.bad_lines == 0 and stats.skipped == 1
    assert _job_1001_with("ElapsedRaw", "Unknown")[1].skipped == 1


def test_large_values_that_mean_something_are_kept() -> None:
    """Not every 4294967294 is a sentinel: a UID (nfsnobody was 4294967294), a MaxRSS in bytes
    (4 GiB - 1)."""
    out, stats = _job_1001_with("UID", NO_VAL, MaxRSS=INFINITE)
    assert stats.bad_lines == 0
    assert out[0].request.user_id == 4294967294
    assert out[0].max_rss_mb == pytest.approx(4096)  # the 3G step below it, the job line's above


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("Submit", "0001-01-01T00:00:00"),
        ("Start", "1970-01-01T00:00:00"),
        ("End", "1969-12-31T23:59:59"),
    ],
)
def test_a_time_at_or_before_1970_is_a_bad_line(
    caplog: pytest.LogCaptureFixture, field: str, value: str
) -> None:
    """Submit=0001-01-01T00:00:00 was stored as -62135596800: the job the oldest of the store."""
    with caplog.at_level(logging.WARNING):
        out, stats = _job_1001_with(field, value)
    assert out == [] and stats.bad_lines == 1
    assert f"bad line sentinel.txt:2: time {value!r} is at or before 1970-01-01T00:00:00 UTC" in caplog.text


# What sacct 22.05 does not record (no script, task count per job, CPUs per task nor time_min):
# every row trained from it has these unknown. docs/training.md says so.
NOT_IN_SACCT = (
    "log_time_min_min",
    "log_tasks",
    "log_cpus_per_task",
    "hash_script_signature",
    "h30d_sig_log_jobs",
    "h30d_sig_log_last_s",
    "h30d_sig_log_median_s",
)


def test_what_sacct_does_not_record_is_unknown_in_every_row_and_only_that(records: Parsed) -> None:
    """The plugin sends these at submission; trees split on none of them (a column unknown in every
    training row has no split), so serving them changes no prediction. Every other feature is known
    in some row: a new field that training never sees from sacct shows here."""

    def days_later(r: JobRecord, days: int) -> JobRecord:
        request = replace(r.request, submit_time=(r.request.submit_time or 0) + days * 86400)
        end = r.end_time and r.end_time + days * 86400
        return replace(r, job_id=f"{r.job_id}-{days}", request=request, end_time=end)

    later = [days_later(r, days) for days in range(3) for r in records["by_id"].values()]  # a history
    data = build_dataset(later)
    unknown = {name for i, name in enumerate(FEATURE_NAMES) if np.isnan(data.x[:, i]).all()}
    assert unknown == set(NOT_IN_SACCT)
    # LightGBM bins a column unknown in every row into one bin: none of the models' trees splits on it.
    params = {"objective": "regression", "min_data_in_leaf": 1, "min_data_in_bin": 1, "verbose": -1}
    trees = lightgbm.train(params, lightgbm.Dataset(data.x, np.log1p(data.elapsed_s)), num_boost_round=20)
    splits = dict(zip(FEATURE_NAMES, trees.feature_importance("split"), strict=True))
    assert sum(splits.values()) > 0 and all(splits[name] == 0 for name in NOT_IN_SACCT)
