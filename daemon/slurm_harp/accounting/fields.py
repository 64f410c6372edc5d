"""Parsers for the value forms Slurm prints in accounting output (durations, sizes, counts and TRES
are read by slurm_formats, as everywhere else).

Sentinels (empty, Unknown, None, INVALID, Partition_Limit, UNLIMITED, and in a count Slurm's
NO_VAL / INFINITE numbers) become None; anything else that does not parse (a time at or before
1970 too) raises ValueError so the caller can count the line as bad. So does a
number too large to store: SQLite's integers are 64-bit, and one such value in a window would
otherwise stop every harvest of that window.
Slurm's tools print, and read, times in their process's local zone, whose hour repeats when clocks go
back: harp runs them in SLURM_ZONE (slurm_tool_environ) and reads their times there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime, tzinfo

from slurm_harp.slurm_formats import is_sentinel, parse_count

SLURM_ZONE = UTC
# A finished job's times later than this past the reading are a clock's error (a controller whose
# clock was set years ahead, read from a host whose clock is right; a harvest on that controller
# reads with the same clock: commands.harvest, commands.nightly), not a job: kept, it would stay
# the newest submission for years and leave every later challenger no new jobs to be judged on
# (learning.promotion). A day covers a saved file read in another zone than it was written in.
FUTURE_SLACK_S = 86400
_SLURM_TZ = "UTC0"  # POSIX for SLURM_ZONE: needs no time zone database


def parse_limit_minutes(text: str) -> int | None:
    """TimelimitRaw: minutes, or Partition_Limit / UNLIMITED / INVALID (None), also as Slurm's
    NO_VAL (partition's limit) and INFINITE (none) numbers."""
    return parse_count(text)


def parse_time(text: str, zone: tzinfo | None = None) -> int | None:
    """sacct's ``2024-03-01T10:00:00`` (see parse_moment) in whole seconds; None for a sentinel.
    ValueError for a time at or before the epoch: Slurm keeps none (0 is its "unknown", printed
    as Unknown), and 0001-01-01T00:00:00 stored made the job the store's oldest by 2000 years."""
    if is_sentinel(text):
        return None
    moment = int(parse_moment(text, zone))
    if moment <= 0:
        raise ValueError(f"time {text.strip()[:40]!r} is at or before 1970-01-01T00:00:00 UTC")
    return moment


def time_problem(moment: float | None, latest: float, earliest: float = 1) -> str | None:
    """What is wrong with a finished job's time ``moment`` (unix seconds; None: unknown, nothing),
    as every reader of accounting and traces checks it: before ``earliest`` (1: at or before 1970,
    which Slurm keeps no time at), or after ``latest`` (the reading plus FUTURE_SLACK_S)."""
    if moment is None:
        return None
    if moment < earliest:
        return (
            "is before 1970-01-01T00:00:00 UTC"
            if earliest <= 0
            else "is at or before 1970-01-01T00:00:00 UTC"
        )
    if moment > latest:
        return "is in the future: the clock that wrote it was wrong"
    return None


def check_times(
    named: Iterable[tuple[str, float | None, object]], latest: float, earliest: float = 1
) -> None:
    """ValueError for the first of a job's times, ``named`` (name, unix seconds, as read), that
    time_problem finds wrong: the caller counts the line as bad."""
    for name, moment, text in named:
        if problem := time_problem(moment, latest, earliest):
            raise ValueError(f"{name} {text} {problem}")


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
