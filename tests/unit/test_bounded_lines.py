"""A trace file holding one line of 100 MB: a bad line, read in bounded memory, the jobs around it
kept (accounting.bounded_lines)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from slurm_harp.accounting import JobRecord, ReadStats, load_records
from tests.conftest import traced_peak
from tests.unit import test_csv_trace, test_sacct

LONG = 100 << 20  # characters
CHUNK = 1 << 20
SWF = ["; Version: 2.2", *(f"{i} {100 * i} 10 100 2 -1 -1 2 200 -1 1 5 6 7 8 -1 -1 -1" for i in range(1, 9))]
_CSV_JOB = "{},u,a,p,normal,600.0,1,2,0,0.0,2019-01-01 00:00:00,2019-01-01 00:00:01,2019-01-01 00:05:01"
CSV = [test_csv_trace.HEADER.rstrip("\n"), *(_CSV_JOB.format(i) + ",300.0,COMPLETED,n,w,s" for i in range(8))]
# Each format's lines, and the name its reader goes by.
TRACES = {"t.swf.gz": SWF, "t.csv": CSV, "t.txt": test_sacct.SACCT_TEXT.split("\n")}


def write(path: Path, lines: list[str], long_at: int | None = None) -> None:
    """``lines``, with a line of LONG characters before line ``long_at`` (its number, from 1)."""
    with gzip.open(path, "wt", compresslevel=1) if path.suffix == ".gz" else path.open("w") as handle:
        for number, line in enumerate(lines, start=1):
            if number == long_at:
                for _ in range(LONG // CHUNK):  # written a chunk at a time: the test's memory too
                    handle.write("9" * CHUNK)
                handle.write("\n")
            handle.write(line + "\n")


def read(path: Path) -> tuple[list[JobRecord], ReadStats, int]:
    """What load_records reads of ``path``, and the most memory it held."""
    stats = ReadStats(source=path.name)
    records, peak = traced_peak(lambda: load_records(path, stats))
    return records, stats, peak


@pytest.mark.parametrize("name", TRACES)
def test_a_line_of_100_mb_is_one_bad_line_read_in_bounded_memory(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 9 MB .gz of one 2 GiB line needed more than 2 GB of memory to read, or ended in a
    MemoryError: every reader took a line whole."""
    lines = TRACES[name]
    (tmp_path / "whole").mkdir()
    write(tmp_path / "whole" / name, lines)
    expected, before, _ = read(tmp_path / "whole" / name)
    assert len(expected) >= 4
    write(tmp_path / name, lines, long_at=4)
    records, stats, peak = read(tmp_path / name)
    assert peak < 16 << 20, f"{peak:,} bytes"
    assert records == expected
    assert (stats.bad_lines, stats.lines) == (before.bad_lines + 1, before.lines + 1)
    assert f"bad line {name}:4: a line of {LONG:,} characters, over the " in caplog.text


def test_lines_up_to_the_cap_are_read_and_numbered_as_in_the_file() -> None:
    from slurm_harp.accounting.bounded_lines import MAX_LINE, bounded_lines

    stats = ReadStats(source="t")
    text = "a\n" + "b" * MAX_LINE + "\n" + "c" * (MAX_LINE + 1) + "\n\nd" + "e" * (MAX_LINE + 5)
    from_file = list(bounded_lines(io.StringIO(text), stats))
    assert from_file == ["a\n", "b" * MAX_LINE + "\n", "\n", "\n", "\n"]
    assert stats.bad_lines == 2 and stats.first_errors[0].startswith(f"t:3: a line of {MAX_LINE + 1:,} ")
    assert stats.first_errors[1].startswith(f"t:5: a line of {MAX_LINE + 6:,} ")
    assert list(bounded_lines(text.splitlines(keepends=True), None)) == from_file


@pytest.mark.parametrize("extra", [-1, 0, 1, CHUNK], ids=["cap-1", "cap", "cap+1", "2cap"])
def test_crlf_lines_near_the_cap_keep_their_numbers_and_lengths(extra: int, tmp_path: Path) -> None:
    """Read as the CSV reader reads (newline=""), a CRLF line of the cap's length came as "...\\r"
    and then a lone "\\n", a line of its own: every line after it was numbered one too high. A
    CRLF line too long was said one character longer than it is."""
    from slurm_harp.accounting.bounded_lines import MAX_LINE, bounded_lines

    length = MAX_LINE + extra
    path = tmp_path / "t.csv"
    path.write_bytes(b"a\r\n" + b"b" * length + b"\r\nc\r\n")
    stats = ReadStats(source="t")
    with path.open(newline="") as handle:
        lines = list(bounded_lines(handle, stats))
    assert len(lines) == 3 and lines[0] == "a\r\n" and lines[2] == "c\r\n"
    if length <= MAX_LINE:
        assert lines[1].rstrip("\r\n") == "b" * length and stats.bad_lines == 0
    else:
        assert lines[1] == "\n" and stats.first_errors == [
            f"t:2: a line of {length:,} characters, over the {MAX_LINE:,} a line may have"
        ]


def test_a_csv_with_crlf_lines_of_the_caps_length_numbers_its_bad_lines_as_in_the_file(
    tmp_path: Path,
) -> None:
    from slurm_harp.accounting.bounded_lines import MAX_LINE

    path = tmp_path / "t.csv"
    jobs = CSV[1:]
    rows = [CSV[0], jobs[0], "x" * MAX_LINE, jobs[1], "x" * (MAX_LINE + 1), jobs[2], "not,a,job"]
    path.write_bytes("\r\n".join(rows).encode() + b"\r\n")
    stats = ReadStats(source=path.name)
    assert len(load_records(path, stats)) == 3
    assert [e.split(":")[1] for e in stats.first_errors] == ["3", "5", "7"]
    assert f"t.csv:5: a line of {MAX_LINE + 1:,} characters" in stats.first_errors[1]
