"""Slurm's text formats, read alike everywhere: counts, TRES lists, durations and time limits, memory
sizes, the words its tools print for "no value" and "no limit", ``scontrol show``'s ``Key=Value``
records and ``scontrol show config``'s ``Key = Value`` lines.

Pure functions, in a layer of their own just above core (pyproject.toml's import layers), so that
every layer reading Slurm text (the advice, the accounting, the guard) reads it the same way. Each
raises ValueError naming the text it cannot read; the caller decides what that means (a bad
accounting line, a bound the guard does without, a partition table the advice cannot read). So does
a number too large to be Slurm's (beyond 2**60: Slurm's are 64-bit, and SQLite could not store one
either, see in_range).
"""

from __future__ import annotations

import math
import re
from typing import TypeVar

__all__ = [
    "OutOfRange",
    "config_value",
    "gpus_in_tres",
    "in_range",
    "is_sentinel",
    "is_unlimited",
    "node_memory_mb",
    "parse_count",
    "parse_duration_s",
    "parse_int",
    "parse_max_time",
    "parse_memory_mb",
    "parse_size_mb",
    "parse_time_limit",
    "parse_tres",
    "scontrol_records",
]

# What Slurm's tools print for a value they do not have (any case).
_SENTINELS = frozenset({"", "unknown", "none", "invalid", "partition_limit", "unlimited", "n/a"})
# Slurm's words for no time limit (time_str2mins): UNLIMITED, INFINITE and -1.
_NO_LIMIT = frozenset({"unlimited", "infinite", "-1"})
# slurm.h's NO_VAL, INFINITE, NO_VAL64, INFINITE64: "no value" and "no limit" in its counters.
_SLURM_NO_VALUES = frozenset({2**32 - 2, 2**32 - 1, 2**64 - 2, 2**64 - 1})
# NO_VAL64 and INFINITE64 as sacct prints a size (convert_num_unit, a double): 2**64 whatever the
# unit; a number far past it is one too large (OutOfRange), not a sentinel.
_NO_VAL64_PRINTED = float(2**64 - 2)
_WHOLE = re.compile(r"[0-9]+")
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # sacct's TotalCPU has milliseconds: 02:03.123
_DURATION_FORMS = "minutes, minutes:seconds, [days-]hours:minutes:seconds, days-hours[:minutes]"
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)((?i:[KMGTP])?)([nc]?)")
# Binary multiples, as Slurm's convert_num_unit and str_to_mbytes use.
_MULTIPLIER = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}
_MB = 1024.0**2
# SQLite's INTEGER is signed 64-bit; 2**60 leaves room for the sum of a few values (start + run).
_INT_LIMIT = 2**60
_N = TypeVar("_N", int, float)


def is_sentinel(text: str) -> bool:
    """Whether a tool printed "no value" (blank, Unknown, None, INVALID, Partition_Limit, ...)."""
    return text.strip().lower() in _SENTINELS


def is_unlimited(text: str) -> bool:
    """A sentinel, or one of Slurm's words for no limit (INFINITE, -1): no limit to apply."""
    return is_sentinel(text) or text.strip().lower() in _NO_LIMIT


class OutOfRange(ValueError):
    """A number written right but too large (or NaN, infinite): a caller can say so, not "bad form"."""


def in_range(value: _N, text: str) -> _N:
    """``value`` (read from ``text``) if SQLite can store it as an integer, else OutOfRange naming
    the text (NaN and infinities too)."""
    if not -_INT_LIMIT < value < _INT_LIMIT:
        raise OutOfRange(f"number out of range {text[:40]!r}")
    return value


def parse_int(text: str) -> int | None:
    """A whole number a Slurm tool printed (a UID, a count: see parse_count): ASCII digits, no sign;
    None for a sentinel. int() also reads ``-2``, ``1_000`` and other scripts' digits (``١٠٤``),
    which Slurm never prints: a garbled or forged sacct line stored NNodes=-2 as -2 nodes and
    -2000 MB per node."""
    value = _digits(text)
    return None if value is None else in_range(value, text)


def parse_count(text: str) -> int | None:
    """A count or span a Slurm tool printed (sacct's ElapsedRaw, ReqCPUS, NNodes, TimelimitRaw, a
    TRES count) as parse_int reads it; Slurm's NO_VAL / INFINITE (32- and 64-bit) are None, as
    "Unknown" is: some releases print them as numbers, and ReqNodes=4294967294 was stored as that
    many nodes of 1 MB. Not for a UID (nfsnobody was 4294967294) nor a size in bytes (MaxRSS may be
    2**32 - 1)."""
    value = _digits(text)
    return None if value is None or value in _SLURM_NO_VALUES else in_range(value, text)


def _digits(text: str) -> int | None:
    if is_sentinel(text):
        return None
    digits = text.strip()
    if _WHOLE.fullmatch(digits) is None:
        raise ValueError(f"bad count {text[:40]!r}: expected digits 0-9")
    return int(digits)


def parse_tres(text: str) -> dict[str, str]:
    """A TRES list (sacct's ReqTRES and AllocTRES, scontrol's TRES), ``billing=4,cpu=4,gres/gpu=2,
    mem=8G,node=1`` -> {"billing": "4", ...}; {} for a sentinel. ValueError for an item without
    ``=`` or a name."""
    out: dict[str, str] = {}
    if is_sentinel(text):
        return out
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"bad TRES {text!r}")
        out[name.strip()] = value.strip()
    return out


def gpus_in_tres(tres: dict[str, str]) -> int | None:
    """Total GPUs in a TRES map: ``gres/gpu`` if present, else the sum of typed ``gres/gpu:x``; None
    when there are none or their count is not known (NO_VAL, "Unknown")."""
    if "gres/gpu" in tres:
        return parse_count(tres["gres/gpu"])
    typed = [parse_count(v) for k, v in tres.items() if k.startswith("gres/gpu:")]
    if not typed or None in typed:  # one type's count unknown: so is the total
        return None
    return in_range(sum(n for n in typed if n is not None), "the sum of gres/gpu:*")


def parse_duration_s(text: str) -> float | None:
    """A duration a Slurm tool printed (sacct, squeue) in seconds; None for a sentinel or no limit.

    Slurm's forms (time_str2secs): ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``; the seconds may have a
    fraction (``02:03.123``). ValueError for anything else.
    """
    return None if is_unlimited(text) else _seconds(text, "bad duration", _SECONDS)


def parse_time_limit(text: str) -> int | None:
    """A time limit as Slurm reads one (``--time``, slurm.conf's MaxTime) in whole minutes, seconds
    rounded up as time_str2mins does; None for UNLIMITED, INFINITE or -1. ValueError for anything
    else, a blank, another word or a fraction of a second included: a user or a config gave it."""
    if text.strip().lower() in _NO_LIMIT:
        return None
    return math.ceil(_seconds(text, "time limit", _WHOLE) / 60.0)


def parse_max_time(text: str) -> int | None:
    """A limit a tool printed (scontrol's MaxTime, sacctmgr's MaxWall) in minutes as parse_time_limit
    reads it; None for a sentinel or no limit."""
    return None if is_unlimited(text) else parse_time_limit(text)


def _seconds(text: str, what: str, seconds_form: re.Pattern[str]) -> float:
    value = text.strip()
    days, dash, clock = value.partition("-") if "-" in value else ("0", "", value)
    parts = clock.split(":")
    seconds_at = 2 if dash else (len(parts) - 1 if len(parts) > 1 else -1)
    if not (
        _WHOLE.fullmatch(days)
        and len(parts) <= 3
        and all((seconds_form if i == seconds_at else _WHOLE).fullmatch(p) for i, p in enumerate(parts))
    ):
        raise ValueError(f"{what} {text[:40]!r}: expected {_DURATION_FORMS} or UNLIMITED")
    if dash:
        hours, minutes, seconds = [*parts, "0", "0"][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, minutes, seconds = "0", parts[0], (parts[1] if len(parts) == 2 else "0")
    # float() first: a 400-digit field is out of range, not an int() too long to convert.
    d, h, m, s = (in_range(float(p), text) for p in (days, hours, minutes, seconds))
    return in_range(d * 86400.0 + h * 3600.0 + m * 60.0 + s, text)


def parse_size_mb(text: str, bare_unit: str) -> tuple[float, str] | None:
    """A size such as ``4000M``, ``4Gn``, ``512Mc`` or ``1234567`` -> (MB, flavour); None for a
    sentinel. Units K, M, G, T, P in either case, binary.

    Slurm's NO_VAL64 and INFINITE64 are sentinels too: sacct prints them as a double,
    ``18446744073709551616.00M`` (the ReqMem of a job cancelled before slurmctld gave it memory).
    ``bare_unit`` is the unit of a number without suffix ("" bytes for MaxRSS, "M" for ReqMem).
    The flavour is "n" (per node), "c" (per CPU) or "" (no suffix: per job for ReqMem since
    Slurm 21.08, per task for MaxRSS).
    """
    if is_sentinel(text):
        return None
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"bad size {text[:40]!r}: expected a number with an optional K, M, G, T or P")
    number, unit, flavour = match.groups()
    if float(number) == _NO_VAL64_PRINTED:
        return None
    return in_range(float(number) * _MULTIPLIER[(unit or bare_unit).upper()] / _MB, text), flavour


def parse_memory_mb(text: str) -> float:
    """An amount of memory as Slurm's tools print it (scontrol's TRES and MaxMemPerNode: ``7940M``,
    ``500g``, a bare number of MiB) in MiB; sbatch's ``--mem`` is read by advice/script.py.
    ValueError for anything else: a sentinel, or a per-node or per-CPU suffix, which such an
    amount never has; OutOfRange for one too large."""
    try:
        parsed = parse_size_mb(text, bare_unit="M")
    except OutOfRange:
        raise
    except ValueError:
        parsed = None
    if parsed is None or parsed[1]:
        raise ValueError(f"memory {text[:40]!r}: expected a number with an optional K, M, G, T or P")
    return parsed[0]


def scontrol_records(text: str, first_key: str) -> list[dict[str, str]]:
    """The ``Key=Value`` words of each record in ``scontrol show`` text (with or without
    ``--oneliner``), keyed as scontrol spells them; a record starts at each ``first_key`` (any case,
    kept as given), so a reservation's ``PartitionName=`` is one of its fields. Words before the
    first record and words without ``=`` are not fields; a value keeps any ``=`` after the first."""
    records: list[dict[str, str]] = []
    for token in text.split():
        key, sep, value = token.partition("=")
        if not sep:
            continue
        if key.lower() == first_key.lower():
            records.append({first_key: value})
        elif records:
            records[-1][key] = value
    return records


def config_value(text: str, key: str) -> str | None:
    """The value of ``key`` (as scontrol spells it) in ``scontrol show config``'s ``Key = Value``
    lines, stripped; None where no line has it."""
    for line in text.split("\n"):
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None


def node_memory_mb(nodes_text: str) -> dict[str, int]:
    """Per partition, the memory in MB a job may hold of one of its nodes, from ``scontrol show
    node`` text: RealMemory less MemSpecLimit (what slurmd keeps for the system; slurmctld allocates
    no more, and accounting records this for a job given all of a node), the mean, rounded down,
    where its nodes differ (which of them a job lands on is not known before it runs). A partition
    whose nodes the text does not show (none, or PrivateData=nodes) is absent. A partition's TRES
    would not do: it counts RealMemory whole. ValueError names the node and field that do not
    read."""
    memory: dict[str, list[int]] = {}
    for record in scontrol_records(nodes_text, "NodeName"):
        name = record["NodeName"]
        real = _node_mb(name, "RealMemory", record.get("RealMemory", "0"))
        usable = max(real - _node_mb(name, "MemSpecLimit", record.get("MemSpecLimit", "0")), 0)
        for partition in record.get("Partitions", "").split(","):
            if partition and usable:
                memory.setdefault(partition, []).append(usable)
    return {partition: sum(sizes) // len(sizes) for partition, sizes in memory.items()}


def _node_mb(node: str, key: str, text: str) -> int:
    try:
        value = parse_count(text)
    except ValueError:
        value = None
    if value is None:  # a sentinel too: no size to subtract or to give a job
        raise ValueError(f"node {node}: {key}={text[:40]!r} is no size in MB")
    return value
