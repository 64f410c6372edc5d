"""The running jobs the guard looks at, read from one `squeue` call per poll.

`squeue -O` prints only the fields asked for (about 100 bytes a job, against several KB a job
with `--json`), so one poll over 10,000 running jobs stays cheap for slurmctld and the guard.
The admin comment is the last field: free text of other tools may hold the separator, and
everything after the seventh one is the comment.

A job is read by the id that addresses it alone in `scontrol update` (squeue's JobArrayID):
``1000_7`` for a task of array 1000 and ``1000+1`` for a component of heterogeneous job 1000. Its raw
id is not enough: Slurm (22.05 update_job_str) takes a bare array id for the whole array, even when
that record is running one task, and a bare leader id for every component of its heterogeneous job.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from slurm_harp.accounting.fields import parse_duration_s
from slurm_harp.core.message import Tag, parse_tag

log = logging.getLogger(__name__)

SEPARATOR = "|"
_FIELDS = (
    "JobArrayID",
    "TimeLimit",
    "TimeUsed",
    "Partition",
    "QOS",
    "Reservation",
    "NodeList",
    "admin_comment",
)
SQUEUE_ARGV: tuple[str, ...] = (
    "squeue",
    "--noheader",
    "--states=RUNNING",
    "--Format=" + ",".join(f"{field}:0{SEPARATOR}" for field in _FIELDS),
)
# A job, an array task (job_task) or a heterogeneous job's component (leader+offset).
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+|\+[0-9]+)?")


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str  # the id that addresses this job alone (see the module's note)
    limit_minutes: int | None  # None: unlimited
    elapsed_s: float
    partition: str
    qos: str
    reservation: str | None
    nodes: str
    tag: Tag | None
    lowered_to: int | None = None  # a limit its user or an admin lowered it to while it ran

    @property
    def own_limit_minutes(self) -> int | None:
        """The user's own limit when harp shortened the job (or set its time_min) and may extend it:
        the tag's, or the lower one set while the job ran (guard.lowered_limits)."""
        own = None if self.tag is None else self.tag.extendable_minutes
        if own is None or self.lowered_to is None:
            return own
        return min(own, self.lowered_to)

    @property
    def prediction_minutes(self) -> int | None:
        return None if self.tag is None else self.tag.values.get("t")


def parse_running(text: str) -> Iterator[RunningJob]:
    """Every parseable line of SQUEUE_ARGV's output; a line that does not parse is logged and
    skipped, whatever it raises (one odd job never stops a poll)."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            job = _job(line)
        except Exception as exc:  # ValueError, and OverflowError for a 400-digit duration
            log.warning("squeue line %d skipped: %s: %s", lineno, type(exc).__name__, exc)
            continue
        yield job


def _job(line: str) -> RunningJob:
    parts = line.split(SEPARATOR, len(_FIELDS) - 1)
    if len(parts) != len(_FIELDS):
        raise ValueError(f"{len(parts)} fields, expected {len(_FIELDS)}")
    job_id, limit, used, partition, qos, reservation, nodes, comment = (p.strip() for p in parts)
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"bad job id {job_id[:40]!r}")
    comment = comment[: -len(SEPARATOR)] if comment.endswith(SEPARATOR) else comment
    limit_s = parse_duration_s(limit)
    elapsed = parse_duration_s(used)
    if elapsed is None:
        raise ValueError(f"job {job_id}: no run time {used[:40]!r}")
    if not math.isfinite(elapsed) or (limit_s is not None and not math.isfinite(limit_s)):
        raise ValueError(f"job {job_id}: out of range {limit[:40]!r} or {used[:40]!r}")
    return RunningJob(
        job_id=job_id,
        limit_minutes=None if limit_s is None else round(limit_s / 60.0),
        elapsed_s=elapsed,
        partition=partition,
        qos=qos,
        reservation=None if reservation in ("", "(null)") else reservation,
        nodes=nodes,
        tag=parse_tag(None if comment == "(null)" else comment),
    )
