"""How the reports show what a job store or trace holds: its times as dates whatever they are."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_moment(at: int) -> datetime | None:
    """``at`` (unix seconds) in UTC; None for a time no date holds (past the year 9999): a job
    store may hold one, stored before the trace readers checked times."""
    try:
        return datetime.fromtimestamp(at, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def utc_text(at: int, form: str) -> str:
    """``at`` as ``form`` (strftime) in UTC, or ``unix time N`` when no date holds it."""
    moment = utc_moment(at)
    return f"unix time {at}" if moment is None else moment.strftime(form)
