"""The bookkeeping of one reader pass: lines read, records made, bad lines logged and counted."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from slurm_harp.core.job import JobRecord

# Past this many, bad lines are logged at DEBUG only: a garbage file must not flood the log.
_LOUD_BAD_LINES = 20


@dataclass
class ReadStats:
    """What a reader did with its input. Bad lines are counted and logged, never fatal."""

    source: str = "<input>"
    lines: int = 0
    records: int = 0
    bad_lines: int = 0
    skipped: int = 0  # well-formed but not usable: unfinished, zero run time, step without job
    first_errors: list[str] = field(default_factory=list)

    def bad(self, lineno: int, reason: str, log: logging.Logger) -> None:
        self.bad_lines += 1
        message = f"{self.source}:{lineno}: {reason}"
        if self.bad_lines <= _LOUD_BAD_LINES:
            self.first_errors.append(message)
            log.warning("bad line %s", message)
        else:
            log.debug("bad line %s", message)

    def collect(
        self, lineno: int, build: Callable[[], JobRecord | None], into: list[JobRecord], log: logging.Logger
    ) -> None:
        """Append what ``build`` makes of one line to ``into``: a ValueError is a bad line (logged
        with its number), None a well-formed line that is not a usable job (counted as skipped)."""
        try:
            record = build()
        except ValueError as exc:
            self.bad(lineno, str(exc), log)
            return
        if record is None:
            self.skipped += 1
        else:
            into.append(record)

    def summary(self) -> str:
        lines = f"{self.lines} line{'s' * (self.lines != 1)}"
        records = f"{self.records} record{'s' * (self.records != 1)}"
        return f"{self.source}: {lines}, {records}, {self.bad_lines} bad, {self.skipped} skipped"
