from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import pytest

from slurm_harp.accounting import ReadStats, load_records, read_swf
from slurm_harp.accounting.swf import parse_swf
from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE, SHARED_TRACES

KTH = BUNDLED_TRACE
LANL = SHARED_TRACES / "LANL-CM5-1994-4.1-cln.swf.gz"
# LANL-CM5 has what the bundled KTH trace lacks (memory, CPU time, queues, applications); it is not
# in the repository, so the one check of those fields runs only where the shared traces are.
needs_lanl = pytest.mark.skipif(not LANL.exists(), reason=f"LANL-CM5 trace not found at {LANL}")

HEADER = "; Version: 2.2\n; UnixStartTime: 1000000000\n; TimeZone: 3600\n"


def _slice(path: Path, lines: int) -> list[str]:
    with gzip.open(path, "rt") as handle:
        return list(itertools.islice(handle, lines))


def test_kth_slice_maps_fields() -> None:
    stats = ReadStats(source="kth")
    records = parse_swf(_slice(KTH, 300), stats)
    assert stats.bad_lines == 0
    assert len(records) == stats.records > 250
    first = records[0]
    # "15 599850 192180 3477 4 -1 -1 4 53940 -1 1 12 12 -1 -1 -1 -1 -1", UnixStartTime 843480031
    assert first.job_id == "15"
    assert first.request.submit_time == 843480031 + 599850
    assert first.start_time == first.request.submit_time + 192180
    assert first.end_time == first.start_time + 3477
    assert first.elapsed_s == 3477
    assert first.request.time_limit_minutes == 899  # ceil(53940 / 60)
    assert first.request.min_cpus == 4 and first.alloc_cpus == 4
    assert (first.request.user_name, first.request.user_id, first.request.account) == ("u12", 12, "g12")
    assert first.request.partition is None and first.request.job_name is None
    assert first.state == "COMPLETED" and not first.censored
    assert first.max_rss_mb is None and first.total_cpu_s is None


@needs_lanl
def test_lanl_memory_and_queue() -> None:
    records = parse_swf(_slice(LANL, 60))
    # "2 465 5 3362 32 489.00 988 32 900 1024 1 3 3 3 1 -1 -1 -1"
    job = next(r for r in records if r.job_id == "2")
    assert job.max_rss_mb == pytest.approx(988 / 1024)
    assert job.request.mem_per_cpu_mb == 1  # ceil(1024 KB / 1024)
    assert job.total_cpu_s == pytest.approx(489.0 * 32)
    assert job.request.partition == "q1" and job.request.job_name == "app3"
    assert job.censored  # ran 3362 s on a 900 s request


def test_censoring_unknowns_and_bad_lines(caplog: pytest.LogCaptureFixture) -> None:
    text = HEADER + (
        "1 0 10 100 2 -1 -1 2 100 -1 1 5 6 7 8 -1 -1 -1\n"  # ran its whole request: censored
        "2 5 10 50 2 -1 -1 -1 100 -1 0 5 6 7 -1 3 -1 -1\n"  # failed, partition id used
        "3 9 -1 20 -1 -1 -1 -1 -1 -1 5 -1 -1 -1 -1 -1 -1 -1\n"  # mostly unknown
        "4 9 1 0 1 -1 -1 1 60 -1 1 5 6 7 8 -1 -1 -1\n"  # zero run time: skipped
        "5 9 1 10 1 -1 -1 1 60 -1 1 5 6 7 8 -1 -1\n"  # 17 fields
        "6 9 1 ten 1 -1 -1 1 60 -1 1 5 6 7 8 -1 -1 -1\n"  # not a number
        "\n"
        "7 9 1 nan 1 -1 -1 1 60 -1 1 5 6 7 8 -1 -1 -1\n"  # not finite
        "8 9 1 1e300 1 -1 -1 1 60 -1 1 5 6 7 8 -1 -1 -1\n"  # finite, but no integer SQLite stores
    )
    stats = ReadStats(source="t.swf")
    records = parse_swf(text.splitlines(), stats)
    by_id = {r.job_id: r for r in records}
    assert sorted(by_id) == ["1", "2", "3"]
    assert (stats.bad_lines, stats.skipped, stats.lines) == (4, 1, 8)
    assert "t.swf:12: number out of range '1e300'" in caplog.text
    assert "t.swf:8:" in caplog.text  # line numbers count the header lines
    assert by_id["1"].censored and by_id["1"].request.submit_time == 1_000_000_000
    assert by_id["1"].request.partition == "q8"
    assert not by_id["2"].censored and by_id["2"].state == "FAILED"
    assert by_id["2"].request.partition == "p3"
    assert by_id["2"].request.min_cpus == 2  # requested unknown: allocated
    three = by_id["3"]
    assert three.state == "CANCELLED" and not three.censored
    assert three.request.time_limit_minutes is None and three.request.user_name is None
    assert three.start_time is None and three.alloc_cpus is None and three.request.min_cpus is None


def test_plain_and_gzipped_files(tmp_path: Path) -> None:
    text = HEADER + "1 0 10 100 2 -1 -1 2 200 -1 1 5 6 7 8 -1 -1 -1\n"
    plain = tmp_path / "t.swf"
    plain.write_text(text)
    packed = tmp_path / "t.swf.gz"
    with gzip.open(packed, "wt") as handle:
        handle.write(text)
    assert read_swf(plain) == read_swf(packed) == load_records(packed)
    assert len(load_records(plain)) == 1


def _damaged(tmp_path: Path) -> dict[str, Path]:
    """A gzipped trace cut short, one with corrupt bytes inside, and text named .gz."""
    whole = BUNDLED_TRACE.read_bytes()
    corrupt = bytearray(whole)
    corrupt[2000:2400] = bytes(b ^ 0x55 for b in corrupt[2000:2400])
    files = {"truncated": whole[:3000], "corrupt": bytes(corrupt), "not gzip": b"1 0 10 100 2\n"}
    paths = {}
    for what, data in files.items():
        paths[what] = tmp_path / f"{what.replace(' ', '_')}.swf.gz"
        paths[what].write_bytes(data)
    return paths


def test_a_damaged_compressed_trace_is_a_value_error_naming_it(tmp_path: Path) -> None:
    for what, path in _damaged(tmp_path).items():
        with pytest.raises(ValueError, match=f"{path.name}: damaged compressed trace") as caught:
            load_records(path)
        assert caught.value.__cause__ is not None, what  # gzip's own error is kept as the cause


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{trace}"],
        ["simulate", "{trace}"],
        ["train", "--source", "{trace}", "--store", "{tmp}/store"],
        ["demo", "--trace", "{trace}", "--store", "{tmp}/demo"],
        ["import", "--db", "{tmp}/jobs.sqlite", "{trace}"],
    ],
)
def test_commands_name_a_damaged_compressed_trace(
    tmp_path: Path, command: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Each command reading a trace ends with an error naming the file, not gzip's traceback."""
    trace = _damaged(tmp_path)["truncated"]
    argv = [word.format(trace=trace, tmp=tmp_path) for word in command]
    assert main(argv) != 0
    assert f"{trace}: damaged compressed trace" in caplog.text


def test_an_upper_case_gz_suffix_is_gunzipped(tmp_path: Path) -> None:
    text = HEADER + "1 0 10 100 2 -1 -1 2 200 -1 1 5 6 7 8 -1 -1 -1\n"
    packed = tmp_path / "T.SWF.GZ"
    packed.write_bytes(gzip.compress(text.encode()))
    assert len(read_swf(packed)) == len(load_records(packed)) == 1


def test_a_time_before_1970_or_from_the_future_is_a_bad_line(caplog: pytest.LogCaptureFixture) -> None:
    """The sacct reader's checks (fields.time_problem). A UnixStartTime in milliseconds stored a
    job in the year 27969, and every `harp nightly` after ended in a traceback on it."""
    now = 1_700_000_000
    job = "1 0 10 600 1 -1 -1 1 3600 -1 1 1 1 1 1 1 -1 -1\n"  # submitted at 0, ended 610 s later
    for header, problem in [
        ("; UnixStartTime: 820454400000\n", "submit time 820454400000 (unix seconds) is in the future"),
        ("; UnixStartTime: -100000\n", "submit time -100000 (unix seconds) is before 1970-01-01"),
        (
            f"; UnixStartTime: {now + 86400 - 609}\n",
            f"end time {now + 86401} (unix seconds) is in the future",
        ),
    ]:
        stats = ReadStats(source="t.swf")
        assert parse_swf((header + job).splitlines(), stats, now=now) == []
        assert (stats.lines, stats.bad_lines) == (1, 1)
        assert f"bad line t.swf:2: {problem}" in caplog.text
    # A day of slack past the reading, as sacct's; a trace without UnixStartTime counts from 0.
    (near,) = parse_swf((f"; UnixStartTime: {now + 86400 - 610}\n" + job).splitlines(), now=now)
    assert near.end_time == now + 86400
    (first,) = parse_swf(job.splitlines(), now=now)
    assert first.request.submit_time == 0
