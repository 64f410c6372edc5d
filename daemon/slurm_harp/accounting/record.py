"""One finished job as accounting saw it, and the bookkeeping of a reader pass."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from slurm_harp.core.request import JobRequest

# States after which a job never runs again (sacct names; the other readers map onto them).
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
# The job was stopped from outside before it ended on its own: its run time is a lower bound.
CENSORING_STATES = frozenset({"TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "PREEMPTED", "NODE_FAIL"})

# Past this many, bad lines are logged at DEBUG only: a garbage file must not flood the log.
_LOUD_BAD_LINES = 20


@dataclass(frozen=True)
class JobRecord:
    """A finished job: what was asked (``request``) and what happened.

    ``censored`` means the job was stopped at a limit (TIMEOUT, OUT_OF_MEMORY, or in SWF a run
    at or past its request): its true run time (or memory) is at least the observed one.
    """

    job_id: str
    request: JobRequest
    state: str
    elapsed_s: int
    start_time: int | None = None
    end_time: int | None = None
    max_rss_mb: float | None = None  # peak resident memory per node
    total_cpu_s: float | None = None
    alloc_cpus: int | None = None
    censored: bool = False


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
        return (
            f"{self.source}: {self.lines} lines, {self.records} records, "
            f"{self.bad_lines} bad, {self.skipped} skipped"
        )
