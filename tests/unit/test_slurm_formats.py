"""slurm_formats: Slurm's counts, TRES, durations, time limits, sizes and scontrol records, read alike by
the accounting, the advice and the guard."""

from __future__ import annotations

import logging
import math
import re

import pytest

from slurm_harp.advice.partition_shape import shapes_from_scontrol
from slurm_harp.advice.partition_table import from_scontrol
from slurm_harp.advice.script import parse_script
from slurm_harp.guard.bounds import parse_partition_max, parse_qos
from slurm_harp.slurm_formats import (
    gpus_in_tres,
    parse_duration_s,
    parse_max_time,
    parse_memory_mb,
    parse_size_mb,
    parse_time_limit,
    parse_tres,
    scontrol_records,
)
from tests.unit.test_sacct_lines import _job, _read

# ---- durations and time limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-02:03:04", 93784.0),
        ("02:03:04", 7384.0),
        ("02:03.123", 123.123),
        ("00:00.004", 0.004),
        ("59", 3540.0),  # a bare number is minutes, as Slurm reads it (it was seconds here)
        ("1-02", 93600.0),  # days-hours (it was days-seconds here)
        ("1-02:03", 93780.0),  # days-hours:minutes (it was days-minutes:seconds here)
        ("10-00:00:00", 864000.0),
        ("", None),
        ("Unknown", None),
        ("INFINITE", None),  # Slurm's words for no limit (they raised here)
        ("-1", None),
    ],
)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize("text", ["1:2:3:4", "a:b", "1-", "::", "59.5", "1.5:00", "+1:00", " 1 :00", "1-2-3"])
def test_bad_durations_raise(text: str) -> None:
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration_s(text)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("60", 60),  # minutes
        ("1:30", 2),  # minutes:seconds, rounded up as Slurm's time_str2mins does
        ("2:00", 2),
        ("02:00:00", 120),  # hours:minutes:seconds
        ("1-0", 1440),  # days-hours
        ("1-2:30", 1590),  # days-hours:minutes
        ("1-02:03:04", 1564),  # days-hours:minutes:seconds
        ("UNLIMITED", None),
        ("infinite", None),
        ("-1", None),
    ],
)
def test_time_limits_as_slurm_reads_them(text: str, minutes: int | None) -> None:
    assert parse_time_limit(text) == minutes


@pytest.mark.parametrize(
    "text", ["", "abc", "1:2:3:4", "1-", "-2", "1.5", "1-2:3:4:5", "Unknown", "NONE", "1:30.5", "٣"]
)
def test_bad_time_limits_are_refused(text: str) -> None:
    """A limit a user or a config gave: a blank, a word other than no limit or a fraction of a
    second is a mistake, as for sbatch."""
    with pytest.raises(ValueError, match="time limit"):
        parse_time_limit(text)


@pytest.mark.parametrize("text", ["45", "1:30", "00:30:30", "1-0", "1-2:30", "1-02:03:04"])
def test_a_time_limit_is_its_duration_in_minutes_rounded_up(text: str) -> None:
    duration = parse_duration_s(text)
    assert duration is not None and parse_time_limit(text) == math.ceil(duration / 60)


@pytest.mark.parametrize("text", ["UNLIMITED", "INFINITE", "NONE", "N/A", "", "Partition_Limit", "-1"])
def test_a_printed_limit_without_a_value_is_no_limit(text: str) -> None:
    assert parse_max_time(text) is None and parse_duration_s(text) is None


@pytest.mark.parametrize("big", ["9" * 400, "9" * 5000])
def test_numbers_beyond_slurms_are_out_of_range_not_a_crash(big: str) -> None:
    for text in (f"{big}:00", f"{big}-00:00:00", f"{'9' * 306}:00:00"):
        with pytest.raises(ValueError, match="number out of range"):
            parse_duration_s(text)
        with pytest.raises(ValueError, match="number out of range"):
            parse_time_limit(text)
    with pytest.raises(ValueError, match="number out of range"):
        parse_size_mb(f"{big}G", bare_unit="M")


# ---- sizes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bare", "expected"),
    [
        ("4000M", "M", (4000.0, "")),
        ("4000", "M", (4000.0, "")),
        ("4Gn", "M", (4096.0, "n")),
        ("512Mc", "M", (512.0, "c")),
        ("2097152", "", (2.0, "")),
        ("1024K", "", (1.0, "")),
        ("1.5G", "", (1536.0, "")),
        ("1T", "", (1024.0 * 1024, "")),
        ("4g", "M", (4096.0, "")),  # units in either case, as sbatch reads them (refused here)
        ("1p", "M", (1024.0**3, "")),
        ("INVALID", "M", None),
        # Slurm's NO_VAL64 and INFINITE64 as sacct prints a size (a double, 2**64): no value.
        ("18446744073709551616.00M", "M", None),
        ("18446744073709551615", "", None),
        ("18446744073709551614Kn", "M", None),
    ],
)
def test_sizes(text: str, bare: str, expected: tuple[float, str] | None) -> None:
    assert parse_size_mb(text, bare_unit=bare) == expected


@pytest.mark.parametrize("text", ["4X", "-1", "4GB", "G", "1e3", "4 G", "4GN", "4Gx"])
def test_bad_sizes_raise(text: str) -> None:
    with pytest.raises(ValueError, match="bad size"):
        parse_size_mb(text, bare_unit="M")


def test_memory_amounts() -> None:
    assert parse_memory_mb("7940M") == 7940 and parse_memory_mb("2G") == 2048
    assert parse_memory_mb("1T") == 1024**2 and parse_memory_mb("512") == 512
    assert parse_memory_mb("1024K") == 1 and parse_memory_mb("2g") == 2048
    with pytest.raises(ValueError, match="memory '-1'"):
        parse_memory_mb("-1")


@pytest.mark.parametrize("text", ["", "UNLIMITED", "4Gn", "512Mc", "1e3", "1_000", " 2 G", ".5G", "inf"])
def test_what_is_not_an_amount_of_memory_is_refused(text: str) -> None:
    """No sentinel, no per-node or per-CPU suffix, and only the digits Slurm writes (the advice's
    own reader took 1e3, 1_000, 2 G and .5G as numbers, which sbatch refuses)."""
    with pytest.raises(ValueError, match="memory"):
        parse_memory_mb(text)


# ---- scontrol records ---------------------------------------------------------------------------


def test_scontrol_records_read_both_layouts_alike() -> None:
    """One record per partition, as scontrol spells the keys, with or without --oneliner; a line
    before the first partition and words without '=' are not fields."""
    lines = "note\nPartitionName=batch\n   MaxTime=1-00:00:00 State=UP\nPartitionName=gpu\n   TotalCPUs=8\n"
    oneliner = "PartitionName=batch MaxTime=1-00:00:00 State=UP\nPartitionName=gpu TotalCPUs=8\n"
    want = [
        {"PartitionName": "batch", "MaxTime": "1-00:00:00", "State": "UP"},
        {"PartitionName": "gpu", "TotalCPUs": "8"},
    ]
    assert scontrol_records(lines, "PartitionName") == scontrol_records(oneliner, "PartitionName") == want
    assert scontrol_records("State=UP\n", "PartitionName") == []


def test_a_reservations_partition_is_one_of_its_fields() -> None:
    text = "ReservationName=r1 PartitionName=(null) TRES=cpu=2\nReservationName=r2 partitionname=batch\n"
    assert scontrol_records(text, "ReservationName") == [
        {"ReservationName": "r1", "PartitionName": "(null)", "TRES": "cpu=2"},
        {"ReservationName": "r2", "partitionname": "batch"},
    ]


# ---- the callers read alike ---------------------------------------------------------------------

PARTITIONS = """PartitionName=none
   MaxTime=NONE TotalNodes=1 TotalCPUs=4
PartitionName=infinite
   MaxTime=INFINITE TotalNodes=1 TotalCPUs=4
PartitionName=day
   MaxTime=1-02 TotalNodes=1 TotalCPUs=4
PartitionName=half
   MaxTime=00:30:30 TotalNodes=1 TotalCPUs=4
PartitionName=open
   MaxTime=UNLIMITED TotalNodes=1 TotalCPUs=4
"""
MAX_MINUTES = {"day": 1560, "half": 31}


@pytest.mark.parametrize("layout", ["lines", "oneliner"])
def test_the_advice_and_the_guard_read_a_partitions_maxtime_alike(layout: str) -> None:
    """The advice refused MaxTime=NONE in one reader and took it as no limit in the other; the guard
    read 1-02 as a day and 2 s, rounded 30 min 30 s down, and read no layout but --oneliner."""
    text = PARTITIONS if layout == "lines" else PARTITIONS.replace("\n   ", " ")
    table = {name: p.max_minutes for name, p in from_scontrol(text).partitions.items()}
    shapes = {name: s.max_minutes for name, s in shapes_from_scontrol(text).items()}
    assert table == shapes == dict.fromkeys(["none", "infinite", "open"], None) | MAX_MINUTES
    assert parse_partition_max(text) == MAX_MINUTES


def test_the_guard_logs_the_bound_it_cannot_read_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    """INFINITE is Slurm's word for no limit, not an unreadable one (it was logged as such)."""
    with caplog.at_level(logging.WARNING):
        assert parse_partition_max("PartitionName=a MaxTime=INFINITE\nPartitionName=b MaxTime=soon\n") == {}
        assert parse_qos("normal|INFINITE\nlong|1-02\nodd|1:2:3:4\n").max_minutes == {"long": 1560}
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "partition 'b' MaxTime unreadable, not a bound",
        "QOS 'odd' MaxWall unreadable, not a bound",
    ]


def test_a_bad_maxtime_still_names_the_partition_for_the_advice() -> None:
    for read in (from_scontrol, shapes_from_scontrol):
        with pytest.raises(ValueError, match=r"scontrol partition p: MaxTime: time limit 'soon'"):
            read("PartitionName=p MaxTime=soon TotalNodes=1\n")
        with pytest.raises(ValueError, match=r"scontrol partition p: .*number out of range"):
            read(f"PartitionName=p MaxTime={'9' * 400} TotalNodes=1\n")


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("cpu=8,mem=64G,node=1,gres/gpu=4", 4),
        ("cpu=8,mem=64G,node=1,gres/gpu:a100=2,gres/gpu:v100=2", 4),
        ("cpu=8,mem=64G,node=1", None),
        ("cpu=8,mem=64G,node=1,gres/gpu=4294967294", None),  # Slurm's NO_VAL: not known
        ("cpu=8,mem=64G,node=1,gres/gpu:a100=2,gres/gpu:v100=4294967294", None),
    ],
)
def test_the_advice_and_the_accounting_read_a_partitions_gpus_alike(tres: str, gpus: int | None) -> None:
    """The advice read scontrol's TRES on its own: NO_VAL GPUs were 4,294,967,294 GPUs to price."""
    assert gpus_in_tres(parse_tres(tres)) == gpus
    shape = shapes_from_scontrol(f"PartitionName=p TotalNodes=1 TotalCPUs=8 TRES={tres}")["p"]
    assert shape.gpus == (gpus or 0)


@pytest.mark.parametrize(
    ("tres", "problem", "named"),
    [
        ("gres/gpu=\u0664", "bad count '\u0664'", "TRES gres/gpu: bad count '\u0664'"),
        ("cpu=8,gres/gpu=4,junk", "bad TRES 'cpu=8,gres/gpu=4,junk'", "bad TRES 'cpu=8,gres/gpu=4,junk'"),
    ],
)
def test_a_tres_the_accounting_cannot_read_names_the_partition_for_the_advice(
    tres: str, problem: str, named: str
) -> None:
    """Other scripts' digits were 4 GPUs to the advice, and an item without ``=`` was dropped."""
    with pytest.raises(ValueError, match=re.escape(problem)):
        gpus_in_tres(parse_tres(tres))
    with pytest.raises(ValueError, match=re.escape(f"scontrol partition p: {named}")):
        shapes_from_scontrol(f"PartitionName=p TotalNodes=1 TotalCPUs=8 TRES={tres}")


def test_a_script_reads_memory_and_time_as_sbatch_does() -> None:
    job = parse_script("#!/bin/sh\n#SBATCH --mem=2g --time=1-02\n")
    assert job.request.mem_per_node_mb == 2048 and job.request.time_limit_minutes == 1560
    with pytest.raises(ValueError, match="--mem=1e3"):
        parse_script("#!/bin/sh\n#SBATCH --mem=1e3\n")


def test_the_accounting_reads_sizes_in_either_case_and_durations_as_slurm_does() -> None:
    jobs, stats = _read(_job("1", ReqMem="4g"), _job("2", TotalCPU="59.5"), _job("3", TotalCPU="INFINITE"))
    assert jobs["1"].request.mem_per_node_mb == 4096  # it was a bad line
    assert "2" not in jobs and stats.bad_lines == 1  # 59.5 was seconds; Slurm has no such form
    assert jobs["3"].total_cpu_s is None  # no value, as Unknown (it was a bad line)
