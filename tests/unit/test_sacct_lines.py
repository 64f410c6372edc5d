"""sacct -P robustness: sentinels, ids, and rows broken by a delimiter or newline inside a field."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import pytest

from slurm_harp.accounting import SACCT_FIELDS, JobRecord, ReadStats, harvest_sacct, read_sacct
from slurm_harp.accounting.fields import parse_limit_minutes, parse_time
from slurm_harp.accounting.sacct_lines import split_rows
from slurm_harp.slurm_formats import parse_size_mb
from tests.conftest import delimited

HEADER = "|".join(SACCT_FIELDS)
WIDTH = len(SACCT_FIELDS)


def _job(job_id: str = "2001", name: str = "relax", work_dir: str = "/home/alice", **fields: str) -> str:
    values = {
        "JobIDRaw": job_id,
        "JobID": job_id,
        "JobName": name,
        "User": "alice",
        "UID": "1000",
        "Account": "phys",
        "Partition": "batch",
        "QOS": "normal",
        "State": "COMPLETED",
        "ExitCode": "0:0",
        "ElapsedRaw": "600",
        "TimelimitRaw": "60",
        "ReqMem": "4000M",
        "MaxRSS": "",
        "ReqCPUS": "4",
        "AllocCPUS": "4",
        "NNodes": "1",
        "NTasks": "",
        "ReqNodes": "1",
        "TotalCPU": "00:20:00",
        "ReqTRES": "billing=4,cpu=4,mem=4000M,node=1",
        "Submit": "2024-03-01T09:00:00",
        "Start": "2024-03-01T09:10:00",
        "End": "2024-03-01T09:20:00",
        "WorkDir": work_dir,
        "Flags": "SchedMain",
        "AdminComment": "",
    }
    values.update(fields)
    return "|".join(values[name] for name in SACCT_FIELDS)


def _step(
    job_id: str = "2001",
    step: str = "batch",
    name: str = "batch",
    rss: str = "1G",
    tasks: str = "1",
    nodes: str = "1",
) -> str:
    values = dict.fromkeys(SACCT_FIELDS, "")
    values.update(JobIDRaw=f"{job_id}.{step}", JobID=f"{job_id}.{step}", JobName=name, State="COMPLETED")
    values.update(
        ExitCode="0:0", ElapsedRaw="600", MaxRSS=rss, TotalCPU="00:20:00", NTasks=tasks, NNodes=nodes
    )
    return "|".join(values[name] for name in SACCT_FIELDS)


def _read(
    *lines: str, header: str = HEADER, delimiter: str | None = None
) -> tuple[dict[str, JobRecord], ReadStats]:
    stats = ReadStats(source="t")
    records = read_sacct([header, *lines], stats, delimiter=delimiter)
    return {r.job_id: r for r in records}, stats


# ---- sentinels and ids -------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["Unknown", "None", "INVALID", "", "  unknown "])
def test_time_sentinels_are_none(text: str) -> None:
    assert parse_time(text) is None
    jobs, stats = _read(_job(Start=text, End=text, Submit=text))
    assert stats.bad_lines == 0
    job = jobs["2001"]
    assert (job.start_time, job.end_time, job.request.submit_time) == (None, None, None)


@pytest.mark.parametrize(("text", "minutes"), [("Partition_Limit", None), ("UNLIMITED", None), ("30", 30)])
def test_limit_sentinels(text: str, minutes: int | None) -> None:
    assert parse_limit_minutes(text) == minutes
    jobs, _ = _read(_job(TimelimitRaw=text))
    assert jobs["2001"].request.time_limit_minutes == minutes


@pytest.mark.parametrize(("suffix", "mb"), [("K", 1 / 1024), ("M", 1.0), ("G", 1024.0), ("T", 1024.0**2)])
def test_size_suffixes_are_binary(suffix: str, mb: float) -> None:
    parsed = parse_size_mb(f"3{suffix}", bare_unit="")
    assert parsed is not None and parsed[0] == pytest.approx(3 * mb) and parsed[1] == ""
    jobs, _ = _read(_job(), _step(rss=f"3{suffix}"))
    assert jobs["2001"].max_rss_mb == pytest.approx(3 * mb)


def test_array_het_and_cancelled_by_forms() -> None:
    jobs, stats = _read(
        _job("3004", JobID="3000_4"),
        _step("3004", name="batch").replace("3004.batch|3004.batch", "3004.batch|3000_4.batch"),
        _job("3000", JobID="3000_[5-9]", State="PENDING", ElapsedRaw="0"),
        _job("3010", JobID="3010+0"),
        _job("3011", JobID="3010+1", State="CANCELLED by 1000"),
    )
    assert stats.bad_lines == 0 and stats.skipped == 1  # the pending array remainder
    assert jobs["3004"].request.is_array is True and jobs["3004"].max_rss_mb == pytest.approx(1024)
    assert jobs["3010"].request.is_array is False
    assert jobs["3011"].state == "CANCELLED"


# ---- a delimiter inside a free-text field ------------------------------------------------------


@pytest.mark.parametrize("name", ["a|b", "x | y | z", "|lead", "trail|", "||"])
def test_pipe_in_job_name_is_repaired_on_job_and_step_lines(name: str) -> None:
    jobs, stats = _read(_job(name=name), _step(name=name, rss="2G"))
    assert stats.bad_lines == 0
    job = jobs["2001"]
    assert job.request.job_name == (name.strip() or None)
    assert job.request.user_name == "alice" and job.request.work_dir == "/home/alice"
    assert job.max_rss_mb == pytest.approx(2048)  # the repaired step still folds in


def test_pipe_in_work_dir_and_in_both_free_text_fields() -> None:
    jobs, stats = _read(_job("1", work_dir="/scratch/a|b"), _job("2", name="n|m", work_dir="/w|x|y"))
    assert stats.bad_lines == 0
    assert jobs["1"].request.work_dir == "/scratch/a|b"
    assert (jobs["2"].request.job_name, jobs["2"].request.work_dir) == ("n|m", "/w|x|y")


def test_pipe_with_sacct_p_trailing_delimiter() -> None:
    jobs, stats = _read(_job(name="a|b") + "|", _step(name="a|b") + "|", header=HEADER + "|")
    assert stats.bad_lines == 0 and jobs["2001"].request.job_name == "a|b"


def test_ambiguous_or_unrepairable_rows_are_bad_not_guessed(caplog: pytest.LogCaptureFixture) -> None:
    header = "JobID|State|ElapsedRaw|JobName|WorkDir"
    with caplog.at_level(logging.WARNING):
        jobs, stats = _read("1|COMPLETED|5|a|b|c", "2|COMPLETED|5|ok|/w", header=header)
    assert list(jobs) == ["2"] and stats.bad_lines == 1
    assert "t:2: 6 fields, header has 5: ambiguous" in caplog.text
    # Extra fields that no free-text column can absorb (here they break State and ExitCode).
    jobs, stats = _read(_job("3").replace("|COMPLETED|", "|COMP|LETED|"), _job("4"))
    assert list(jobs) == ["4"] and stats.bad_lines == 1


def test_a_row_with_too_many_readings_is_bad_not_read_from_the_first_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A saved file (harp import, harp train --source FILE) is split on "|". A work dir holding the
    # columns from User to WorkDir as a forger wants them, behind enough padding, has 1,000+ readings:
    # the true one (every extra field in WorkDir) came past the first 500 tried and a shifted one
    # (JobName taking the extras, the forged User and UID read as the job's) won alone.
    fields = _job("2001").split("|")
    fields[SACCT_FIELDS.index("User")], fields[SACCT_FIELDS.index("UID")] = "root", "0"
    forged = fields[SACCT_FIELDS.index("JobName") + 1 : SACCT_FIELDS.index("WorkDir") + 1]
    with caplog.at_level(logging.WARNING):
        jobs, stats = _read(_job("2001", work_dir="|".join(["x"] * 11 + forged)), _job("2002"))
    assert list(jobs) == ["2002"] and stats.bad_lines == 1
    assert "t:2: 60 fields, header has 27: too many delimiters in free text (595 readings" in caplog.text


def test_unit_separator_delimiter_makes_pipes_plain_text() -> None:
    us = "\x1f"
    jobs, stats = _read(
        _job(name="a|b").replace("|", us).replace(f"a{us}b", "a|b"), header=HEADER.replace("|", us)
    )
    assert stats.bad_lines == 0 and jobs["2001"].request.job_name == "a|b"


# ---- a newline inside a field ------------------------------------------------------------------
# Joined when the delimiter is given (the harvest's own, `harp import --delimiter`); in a file read
# with its header's delimiter, one any user may write, a row split over lines ends what is read.


def test_newline_in_a_field_is_joined_back() -> None:
    lines = [
        *_job("1", name="two\nlines").split("\n"),
        *_job("2", name="many\n\nlines\n", work_dir="/a\nb").split("\n"),
        *_step("2", name="s\nt").split("\n"),
        _job("3"),
    ]
    jobs, stats = _read(*lines, delimiter="|")
    assert stats.bad_lines == 0 and sorted(jobs) == ["1", "2", "3"]
    assert jobs["1"].request.job_name == "two\nlines"
    # As written, the last newline too: the name the plugin saw at submission.
    assert jobs["2"].request.job_name == "many\n\nlines\n" and jobs["2"].request.work_dir == "/a\nb"
    assert jobs["2"].max_rss_mb == pytest.approx(1024)


@pytest.mark.parametrize("name", [" spaced ", "None", "Unknown", "invalid", "\tx"])
def test_a_job_name_is_read_as_written(name: str) -> None:
    """Edge spaces were stripped and names such as "None" read as no name: the history key of
    such a job differed between the job store and the plugin, which sends the name as written."""
    jobs, stats = _read(_job(name=name))
    assert stats.bad_lines == 0 and jobs["2001"].request.job_name == name


def test_newline_and_pipe_in_the_same_row() -> None:
    jobs, stats = _read(*_job(name="a|b\nc").split("\n"), delimiter="|")
    assert stats.bad_lines == 0 and jobs["2001"].request.job_name == "a|b\nc"


def test_truncated_lines_are_bad_and_the_next_row_is_read_alone() -> None:
    truncated = _job("1")[:40]
    jobs, stats = _read(truncated, _job("2"), truncated, delimiter="|")
    assert sorted(jobs) == ["2"] and stats.bad_lines == 2
    assert [e.split(":")[1] for e in stats.first_errors] == ["2", "4"]


def test_split_rows_reports_row_start_line_numbers() -> None:
    stats = ReadStats()
    header, rows = split_rows([HEADER, *_job("1", name="x\ny").split("\n"), _job("2")], stats, "|")
    assert header is not None and header.delimiter == "|" and not header.trailing
    assert [(n, len(v)) for n, v in rows] == [(2, WIDTH), (4, WIDTH)]
    assert stats.lines == 3


def _forgeries() -> dict[str, str]:
    """Job 2001 of alice, written so that a reader joining rows split over lines reads a job of
    victim (UID 4242) with a harp tag of alice's choosing, by the three ways a newline in free text
    gives: a work dir holding a whole row; a work dir that ends the row early (Flags takes
    anything) with a whole row after; a job name whose rest supplies User, UID and AdminComment."""
    forged = _job("987654", User="victim", UID="4242", AdminComment="harp:extend,t!=1,t0=100000,v=f")
    columns = forged.split("|")
    before_flags = "|".join(columns[:-1])
    after_name = "|".join(columns[SACCT_FIELDS.index("JobName") :])
    return {
        "a row in a work dir": _job("2001", work_dir=f"/home/alice/d\n{before_flags}"),
        "a row after a work dir ended early": _job("2001", work_dir=f"/d\nx|y\n{before_flags}"),
        "a job name holding the rest of a row": _job("2001", name=f"x\n{after_name}\n"),
    }


@pytest.mark.parametrize("way", sorted(_forgeries()))
@pytest.mark.parametrize("delimiter", ["|", "\x1f"])
def test_a_saved_file_stops_at_a_row_split_over_lines(
    way: str, delimiter: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A saved file's delimiter ("|", the unit separator) is one any user may write beside a
    newline: joining a row split over lines, the reader stored a job of another user with a harp tag
    of the writer's choosing (each way here did, or read victim's UID on alice's job id). The row
    and every line after it are bad now, counted, with one warning; the rows before are read."""
    lines = [_job("1000"), *_forgeries()[way].split("\n"), _job("3000"), _step("3000")]
    lines = [line.replace("|", delimiter) for line in lines]
    first = 3  # the header, job 1000, then alice's job
    with caplog.at_level(logging.WARNING):
        jobs, stats = _read(*lines, header=HEADER.replace("|", delimiter))
    assert list(jobs) == ["1000"]
    assert stats.lines == len([line for line in lines if line.strip()])
    assert stats.bad_lines == stats.lines - 1  # nothing after the split row read, none silently
    assert f"bad line t:{first}: " in caplog.text and "a row split over lines" in caplog.text
    assert f"t: {stats.lines - 2} lines after line {first} not read" in caplog.text


def test_a_saved_file_given_its_random_delimiter_joins_split_rows() -> None:
    """Saved with `sacct --delimiter=<random>`, which no user knew when naming their job: the
    work dir holding a row stays alice's work dir, as in the harvest."""
    sep = "\x1fd41d8cd98f00b204\x1f"
    text = _forgeries()["a row in a work dir"]
    columns = dict(zip(SACCT_FIELDS, text.split("|", SACCT_FIELDS.index("WorkDir")), strict=False))
    work_dir, _, flags = columns["WorkDir"].rpartition("|")
    row = sep.join(
        [*(columns[name] for name in SACCT_FIELDS[: SACCT_FIELDS.index("WorkDir")]), work_dir, flags]
    )
    lines = [*row.split("\n"), _job("3000").replace("|", sep)]
    jobs, stats = _read(*lines, header=HEADER.replace("|", sep), delimiter=sep)
    assert sorted(jobs) == ["2001", "3000"] and stats.bad_lines == 0
    assert jobs["2001"].request.user_name == "alice" and jobs["2001"].request.work_dir == work_dir


def test_harvest_does_not_split_on_unicode_line_breaks() -> None:
    text = HEADER + "\n" + _job(name="a\x85b\u2028c\x1ed") + "\n"

    def runner(argv: Sequence[str]) -> str:
        return delimited(text, argv)

    (record,) = harvest_sacct(runner, "2024-03-01")
    assert record.request.job_name == "a\x85b\u2028c\x1ed"
    assert record.end_time == int(datetime.fromisoformat("2024-03-01T09:20:00").timestamp())


@pytest.mark.parametrize(
    ("tasks", "nodes", "per_node_mb"),
    [
        ("16", "1", 16000),
        ("17", "2", 9000),
        ("8", "2", 4000),
        ("1", "1", 1000),
        ("", "1", 1000),
        ("4", "", 1000),
    ],
)
def test_a_node_s_peak_is_one_task_s_maxrss_times_the_tasks_it_ran(
    tasks: str, nodes: str, per_node_mb: int
) -> None:
    """MaxRSS is one task's peak: 16 MPI tasks of 1000 MB held 16,000 MB on their node, and memory
    advice and rewrites read max_rss_mb as MB per node. Before, it was 1000 whatever the tasks."""
    batch = _step(rss="200M")
    srun = _step(step="0", name="mpi", rss="1000M", tasks=tasks, nodes=nodes)
    jobs, stats = _read(_job("2001", NNodes="2", ReqNodes="2"), batch, srun)
    assert stats.bad_lines == 0
    assert jobs["2001"].max_rss_mb == pytest.approx(per_node_mb)


def test_a_saved_file_without_ntasks_reads_as_one_task_per_node() -> None:
    """Files saved before harp asked sacct for NTasks: as before, one task's MaxRSS."""
    header = "|".join(f for f in SACCT_FIELDS if f != "NTasks")
    drop = SACCT_FIELDS.index("NTasks")

    def without(line: str) -> str:
        fields = line.split("|")
        return "|".join(fields[:drop] + fields[drop + 1 :])

    jobs, stats = _read(without(_job()), without(_step(rss="1000M", tasks="16")), header=header)
    assert stats.bad_lines == 0 and jobs["2001"].max_rss_mb == pytest.approx(1000)
