from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_harp.accounting import ReadStats, load_records, read_csv_trace
from slurm_harp.cli import main
from tests.conftest import SHARED_TRACES

# A real CSV trace (NREL Eagle) is not in the repository: the check on it runs where the shared traces
# are, and the inline traces below test the same reader in every checkout.
EAGLE = SHARED_TRACES / "nrel_eagle_sample.csv"

T0, T1, T2 = "2019-01-01 00:00:00", "2019-01-01 00:00:01", "2019-01-01 00:05:01"
HEADER = (
    "job_id,user,account,partition,qos,wallclock_req,nodes_req,processors_req,gpus_req,mem_req,"
    "submit_time,start_time,end_time,run_time,state,name,work_dir,submit_line\n"
)


def _utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


@pytest.mark.skipif(not EAGLE.exists(), reason=f"NREL Eagle trace not found at {EAGLE}")
def test_eagle_sample() -> None:
    stats = ReadStats(source="eagle")
    records = load_records(EAGLE, stats)
    assert (stats.lines, stats.records, stats.bad_lines) == (1000, 1000, 0)
    assert len({r.job_id for r in records}) == 1000  # array tasks get distinct ids
    assert sum(r.censored for r in records) == sum(r.state == "TIMEOUT" for r in records) == 15
    first = records[0]
    # 532209,user0014,account0003,partition001,normal,172800.0,10,10,0,0.0,2019-01-01 08:55:55,...
    assert first.job_id == "532209"
    assert first.request.time_limit_minutes == 2880
    assert (first.request.min_nodes, first.request.min_cpus, first.request.gpus_per_node) == (10, 10, 0)
    assert first.request.mem_per_node_mb is None  # 0.0 = not given
    assert first.request.submit_time == _utc("2019-01-01 08:55:55")
    assert first.elapsed_s == 99825
    assert first.request.is_array is False
    tasks = [r for r in records if r.job_id.startswith("532939_")]
    assert len(tasks) == 452 and all(r.request.is_array for r in tasks)
    big = next(r for r in records if r.job_id == "532684")
    assert big.request.mem_per_node_mb == 184000  # 552000 MB over 3 nodes


def test_bad_rows_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        HEADER
        + f"1,u,a,p,normal,600.0,1,2,0,0.0,{T0},{T1},{T2},300.0,COMPLETED,n,w,s\n"
        + "2,u,a,p,normal,600.0,1,2\n"
        + f"3,u,a,p,normal,-5,1,2,0,0.0,{T0},{T1},{T2},300.0,COMPLETED,n,w,s\n"
        + f"4,u,a,p,normal,600.0,1,2,0,0.0,yesterday,{T1},{T2},300.0,COMPLETED,n,w,s\n"
        + f"5,u,a,p,normal,600.0,1,2,0,0.0,{T0},,,0.0,COMPLETED,n,w,s\n"
        + f"6,u,a,p,normal,600.0,2,2,4,1000.0,{T0},,,610.0,TIMEOUT,n,w,s\n"
        + f"7,u,a,p,normal,1e300,1,2,0,0.0,{T0},{T1},{T2},300.0,COMPLETED,n,w,s\n"
    )
    stats = ReadStats(source="t.csv")
    records = read_csv_trace(path, stats)
    assert [r.job_id for r in records] == ["1", "6"]
    assert (stats.bad_lines, stats.skipped) == (4, 1)
    assert "t.csv:3:" in caplog.text and "t.csv:8: number out of range '1e300'" in caplog.text
    six = records[1]
    assert six.censored and six.request.gpus_per_node == 2 and six.request.mem_per_node_mb == 500
    assert six.start_time is None


def test_a_time_at_or_before_1970_or_from_the_future_is_a_bad_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As in sacct output (fields.time_problem). Before, 2099 and the year 1 were stored, with no
    bad line: a job of 2099 stays the newest submission, which promotion judges by."""
    path = tmp_path / "t.csv"
    path.write_text(
        HEADER
        + f"1,u,a,p,normal,600.0,1,2,0,0.0,{T0},{T1},{T2},300.0,COMPLETED,n,w,s\n"
        + "2,u,a,p,normal,600.0,1,2,0,0.0,2099-01-01 00:00:00,,,300.0,COMPLETED,n,w,s\n"
        + f"3,u,a,p,normal,600.0,1,2,0,0.0,0001-01-01 00:00:00,{T1},{T2},300.0,COMPLETED,n,w,s\n"
        + f"4,u,a,p,normal,600.0,1,2,0,0.0,{T0},1970-01-01 00:00:00,{T2},300.0,COMPLETED,n,w,s\n"
        + f"5,u,a,p,normal,600.0,1,2,0,0.0,{T0},{T1},2019-01-02 00:00:01,300.0,COMPLETED,n,w,s\n"
    )
    stats = ReadStats(source="t.csv")
    records = read_csv_trace(path, stats, now=_utc("2019-01-01 00:00:00"))
    assert [r.job_id for r in records] == ["1"]
    assert (stats.lines, stats.bad_lines) == (5, 4)
    assert "t.csv:3: submit_time '2099-01-01 00:00:00' is in the future" in caplog.text
    assert "t.csv:4: submit_time '0001-01-01 00:00:00' is at or before 1970" in caplog.text
    assert "t.csv:5: start_time '1970-01-01 00:00:00' is at or before 1970" in caplog.text
    assert "t.csv:6: end_time '2019-01-02 00:00:01' is in the future" in caplog.text


def _row(job_id: str, name: str = "n") -> str:
    return f"{job_id},u,a,p,normal,600.0,1,2,0,0.0,{T0},{T1},{T2},300.0,COMPLETED,{name},w,s\n"


def test_a_row_the_csv_module_refuses_is_a_bad_line_and_the_rest_is_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """csv.Error is no ValueError: a field over the csv module's 128 KB limit ended the import
    with a traceback, this file's good rows and every later file's unread."""
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _row("1") + _row("2", "x" * 200_000) + _row("3", '"a"b') + _row("4"))
    stats = ReadStats(source="t.csv")
    assert [r.job_id for r in read_csv_trace(path, stats)] == ["1", "4"]
    assert (stats.lines, stats.bad_lines) == (4, 2)
    assert "t.csv:3: field larger than field limit (131072)" in caplog.text
    assert "t.csv:4: ',' expected after '\"'" in caplog.text


def test_a_quote_left_open_is_a_bad_line_naming_the_rows_it_took(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The field of a quote never closed took every row after it, silently: 0 bad lines."""
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _row("1") + _row("2", '"open') + _row("3") + _row("4"))
    stats = ReadStats(source="t.csv")
    assert [r.job_id for r in read_csv_trace(path, stats)] == ["1"]
    assert stats.bad_lines == 1
    assert (
        "t.csv:3: unexpected end of data (lines 3-5: a quote left open there took the rows after it)"
        in caplog.text
    )
    # Closed by a later quote, the row reads, row 3 in its name: said, with the lines it spans.
    path.write_text(HEADER + _row("1") + _row("2", '"open') + _row("3", 'closed"') + _row("4"))
    stats = ReadStats(source="t.csv")
    records = read_csv_trace(path, stats)
    assert [r.job_id for r in records] == ["1", "2", "4"] and "\n3,u," in str(records[1].request.job_name)
    assert (
        "t.csv: 1 rows span lines (a quoted field holding a line break, or a quote left open), "
        "the first lines 3-4" in caplog.text
    )


def test_import_reads_the_next_file_after_a_row_the_csv_module_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big, good = tmp_path / "a.csv", tmp_path / "b.csv"
    big.write_text(HEADER + _row("1") + _row("2", "x" * 200_000))
    good.write_text(HEADER + _row("3"))
    db = tmp_path / "jobs.sqlite"
    assert main(["import", "--db", str(db), str(big), str(good)]) == 0
    out = capsys.readouterr().out
    assert (
        "a.csv -> a: 2 lines, 1 jobs, 1 bad lines" in out
        and "b.csv -> b: 1 lines, 1 jobs, 0 bad lines" in out
    )


def test_a_csv_saved_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    """A spreadsheet's save begins with a UTF-8 BOM: the file was refused as missing job_id."""
    path = tmp_path / "t.csv"
    path.write_text("\ufeff" + HEADER + _row("1"), encoding="utf-8")
    assert [r.job_id for r in read_csv_trace(path)] == ["1"]


def test_not_an_eagle_csv(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing columns"):
        read_csv_trace(path)
