"""Parsers for the value forms Slurm prints in accounting output.

Sentinels (empty, Unknown, None, INVALID, Partition_Limit, UNLIMITED) become None; anything
else that does not parse raises ValueError so the caller can count the line as bad. So does a
number too large to store: SQLite's integers are 64-bit, and one such value in a window would
otherwise stop every harvest of that window.
Slurm's tools print, and read, times in their process's local zone, whose hour repeats when clocks go
back: harp runs them in SLURM_ZONE (slurm_tool_environ) and reads their times there.
"""

from __future__ import annotations

import math
import os
import re
from datetime import UTC, datetime, tzinfo
from typing import TypeVar

SLURM_ZONE = UTC
_SLURM_TZ = "UTC0"  # POSIX for SLURM_ZONE: needs no time zone database
_SENTINELS = frozenset({"", "unknown", "none", "invalid", "partition_limit", "unlimited", "n/a"})
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)([nc]?)$")
# Binary multiples, as Slurm's convert_num_unit uses.
_MULTIPLIER = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}
_MB = 1024.0**2
# SQLite's INTEGER is signed 64-bit; 2**60 leaves room for the sum of a few values (start + run).
_INT_LIMIT = 2**60
_N = TypeVar("_N", int, float)


def is_sentinel(text: str) -> bool:
    return text.strip().lower() in _SENTINELS


def parse_int(text: str) -> int | None:
    if is_sentinel(text):
        return None
    return in_range(int(text.strip()), text)


def in_range(value: _N, text: str) -> _N:
    """``value`` (read from ``text``) if SQLite can store it as an integer, else ValueError naming
    the text (NaN and infinities too)."""
    if not -_INT_LIMIT < value < _INT_LIMIT:
        raise ValueError(f"number out of range {text[:40]!r}")
    return value


def parse_limit_minutes(text: str) -> int | None:
    """TimelimitRaw: minutes, or Partition_Limit / UNLIMITED / INVALID (None)."""
    return parse_int(text)


def parse_size_mb(text: str, bare_unit: str) -> tuple[float, str] | None:
    """A size such as ``4000M``, ``4Gn``, ``512Mc`` or ``1234567`` -> (MB, flavour).

    ``bare_unit`` is the unit of a number without suffix ("" bytes for MaxRSS, "M" for ReqMem).
    The flavour is "n" (per node), "c" (per CPU) or "" (no suffix: per job for ReqMem since
    Slurm 21.08, per task for MaxRSS).
    """
    if is_sentinel(text):
        return None
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(f"bad size {text!r}")
    number, unit, flavour = match.groups()
    return in_range(float(number) * _MULTIPLIER[unit or bare_unit] / _MB, text), flavour


def parse_duration_s(text: str) -> float | None:
    """Slurm durations: ``1-02:03:04``, ``02:03:04``, ``02:03.123`` (MM:SS.mmm), ``45.5``."""
    if is_sentinel(text):
        return None
    whole = text = text.strip()
    days = 0
    if "-" in text:
        day_text, text = text.split("-", 1)
        days = int(day_text)
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or any(not p for p in parts):
        raise ValueError(f"bad duration {text!r}")
    seconds = float(parts[-1])
    minutes = int(parts[-2]) if len(parts) >= 2 else 0
    hours = int(parts[-3]) if len(parts) == 3 else 0
    if days < 0 or hours < 0 or minutes < 0 or seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"bad duration {text!r}")
    for part in (days, hours, minutes, seconds):  # each first: a huge int is not even a float
        in_range(part, whole)
    return in_range(days * 86400.0 + hours * 3600.0 + minutes * 60.0 + seconds, whole)


def parse_time(text: str, zone: tzinfo | None = None) -> int | None:
    """sacct's ``2024-03-01T10:00:00`` (see parse_moment) in whole seconds; None for a sentinel."""
    if is_sentinel(text):
        return None
    return int(parse_moment(text, zone))


def parse_moment(text: str, zone: tzinfo | None) -> float:
    """Unix seconds of a time a Slurm tool printed, ``2024-03-01T10:00:00``, without a zone: read in
    ``zone``, or with None in this host's local zone (a saved file, printed in the zone of the host
    that made it; an hour of it repeats when clocks go back). harp runs the tools in SLURM_ZONE."""
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None and zone is not None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def slurm_tool_environ() -> dict[str, str]:
    """This process's environment (SLURM_CONF and the rest) for a Slurm tool, in SLURM_ZONE."""
    return {**os.environ, "TZ": _SLURM_TZ}


def parse_tres(text: str) -> dict[str, str]:
    """``billing=4,cpu=4,gres/gpu=2,mem=8G,node=1`` -> {"cpu": "4", ...}."""
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
    """Total GPUs in a TRES map: ``gres/gpu`` if present, else the sum of typed ``gres/gpu:x``."""
    if "gres/gpu" in tres:
        return parse_int(tres["gres/gpu"])
    typed = [parse_int(v) or 0 for k, v in tres.items() if k.startswith("gres/gpu:")]
    return in_range(sum(typed), "the sum of gres/gpu:*") if typed else None
