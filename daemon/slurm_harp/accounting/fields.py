"""Parsers for the value forms Slurm prints in accounting output (durations and sizes are read by
slurm_formats, as everywhere else).

Sentinels (empty, Unknown, None, INVALID, Partition_Limit, UNLIMITED) become None; anything
else that does not parse raises ValueError so the caller can count the line as bad. So does a
number too large to store: SQLite's integers are 64-bit, and one such value in a window would
otherwise stop every harvest of that window.
Slurm's tools print, and read, times in their process's local zone, whose hour repeats when clocks go
back: harp runs them in SLURM_ZONE (slurm_tool_environ) and reads their times there.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, tzinfo

from slurm_harp.slurm_formats import in_range, is_sentinel

SLURM_ZONE = UTC
_SLURM_TZ = "UTC0"  # POSIX for SLURM_ZONE: needs no time zone database
_COUNT = re.compile(r"[0-9]+")


def parse_int(text: str) -> int | None:
    """A count sacct printed (ElapsedRaw, NNodes, UID, a TRES count): ASCII digits, no sign. int()
    also reads ``-2``, ``1_000`` and other scripts' digits (``١٠٤``), which sacct never prints: a
    garbled or forged line stored NNodes=-2 as -2 nodes and -2000 MB per node."""
    if is_sentinel(text):
        return None
    digits = text.strip()
    if _COUNT.fullmatch(digits) is None:
        raise ValueError(f"bad count {text[:40]!r}: expected digits 0-9")
    return in_range(int(digits), text)


def parse_limit_minutes(text: str) -> int | None:
    """TimelimitRaw: minutes, or Partition_Limit / UNLIMITED / INVALID (None)."""
    return parse_int(text)


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
    """This process's environment (SLURM_CONF and the rest) for a Slurm tool, in SLURM_ZONE, its
    times in the ISO form the readers take: a SLURM_TIME_FORMAT of the site's would change them."""
    return {**os.environ, "TZ": _SLURM_TZ, "SLURM_TIME_FORMAT": "standard"}


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
