"""The jobs the guard looks at, read from one `squeue` call per poll.

`squeue -O` prints only the fields asked for (about 135 bytes a job, against several KB a job
with `--json`), so one poll over 10,000 running jobs stays cheap for slurmctld and the guard.
The admin comment is the last field: free text of other tools may hold the separator, and
everything after the fourteenth one is the comment.

A job is read by the id that addresses it alone in `scontrol update` (squeue's JobArrayID):
``1000_7`` for a task of array 1000 and ``1000+1`` for a component of heterogeneous job 1000. Its raw
id is not enough: Slurm (22.05 update_job_str) takes a bare array id for the whole array, even when
that record is running one task, and a bare leader id for every component of its heterogeneous job.

Running jobs are the ones the guard extends. It lists the pending, suspended, configuring and
completing ones too, but reads only those harp tagged in time_min or extend mode (a substring test
skips the others before any parsing): the guard follows their limits to see one their user lowered
before they ran (guard.lowered_limits). A pending array's own record, ``1000_[3-9]``, stands for its
pending tasks, however Slurm prints them (``1000_[3-99:2]``, ``1000_[3,5,...]``). squeue filters
by state in the client (22.05): slurmctld sends every job whatever the filter.

A job's state may carry flags, and then squeue shows it by one of them alone (22.05
job_state_string_compact) and lists it only for a flag asked for by name: ``--states=RUNNING`` matches
a running job without flags (squeue's _filter_job). A job left out of listings for a minute is forgotten
(guard.lowered_limits), so the guard asks for the flags its jobs carry for a while and reads each by
the state it goes with (22.05 slurmctld): stopped (SIGSTOP: its time runs on), signaled (a
SIGSTOP or SIGCONT on its way) and resizing jobs run; one held after a requeue (special exit, too many
requeues) or its reservation deleted is pending; completing is a job ending, or one requeued and
pending until its epilog ends (guard.lowered_limits tells them apart); configuring, its nodes booting,
and any flag not placed here keep what was seen of the job.

squeue prints a duration over a year, or below 0, as INVALID (22.05 _print_secs). A time limit so
printed is over a year (OVER_A_YEAR: at least that), and a job with one is never extended (its true
limit is not known, and an extension below it would cut it). A run time so printed (a job run over a
year, or one started ahead of this host's clock after it stepped back) is a line skipped, but not one
that fails to read: such a line alone never fails the poll (guard.loop).

A job's deadline (``--deadline``) is read too: Slurm starts such a job with a limit that ends by it,
and it bounds the guard's extensions (guard.bounds). So are its cluster, account and user: they name
its association, whose MaxWall may bound them too (guard.associations).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from slurm_harp.accounting.fields import SLURM_ZONE, parse_moment
from slurm_harp.core.policy import Mode
from slurm_harp.core.tag import TAG_PREFIX, Tag, parse_tag
from slurm_harp.slurm_formats import is_sentinel, parse_duration_s

log = logging.getLogger(__name__)

SEPARATOR = "|"
UNLIMITED = sys.maxsize  # a job with no time limit, where a limit in minutes is compared
# squeue prints a limit over a year (Slurm's YEAR_MINUTES) as INVALID: read as the least it may be.
YEAR_MINUTES = 365 * 24 * 60
OVER_A_YEAR = YEAR_MINUTES + 1
# The states a job is read in: squeue's StateCompact of three base states and of completing,
RUNNING, PENDING, SUSPENDED, COMPLETING = "R", "PD", "S", "CG"
# and configuring (CF) or a flag not placed here: what was seen of the job is kept.
UNSETTLED = "~"
# StateCompact -> the state a job is read in (see the module's note).
_STATE_OF = {
    RUNNING: RUNNING, "ST": RUNNING, "SI": RUNNING, "RS": RUNNING,
    PENDING: PENDING, "SE": PENDING, "RH": PENDING, "RD": PENDING,
    SUSPENDED: SUSPENDED, COMPLETING: COMPLETING, "CF": UNSETTLED,
}  # fmt: skip
# squeue's names of the base states and the flags listed: a flag lists every job that carries it.
_LISTED = (
    "RUNNING,STOPPED,SIGNALING,RESIZING,PENDING,SPECIAL_EXIT,REQUEUE_HOLD,RESV_DEL_HOLD,"
    "SUSPENDED,COMPLETING,CONFIGURING"
)
# squeue's StateCompact codes: one to three capitals (OOM).
_STATE_CODE = re.compile(r"[A-Z]{1,3}")
_FIELDS = (
    "JobArrayID",
    "StateCompact",
    "RestartCnt",
    "SubmitTime",
    "TimeLimit",
    "TimeUsed",
    "Partition",
    "QOS",
    "Cluster",
    "Account",
    "UserName",
    "Reservation",
    "NodeList",
    "Deadline",
    "admin_comment",
)
SQUEUE_ARGV: tuple[str, ...] = (
    "squeue",
    "--noheader",
    "--states=" + _LISTED,
    "--Format=" + ",".join(f"{field}:0{SEPARATOR}" for field in _FIELDS),
)
# A job, an array task (job_task) or a heterogeneous job's component (leader+offset).
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+|\+[0-9]+)?")
# A pending array's own record: its pending tasks, as 22.05 xlate_array_task_str prints them: ranges,
# a step when evenly spaced (``1-99:2``), cut short with ``...`` (SLURM_BITSTR_LEN) or by squeue.
_ARRAY_RECORD = re.compile(r"[0-9]+_\[[0-9,\-:%.\]]*")
# The tags whose jobs the guard follows before they run: no other job that is not running is parsed.
_FOLLOWED = tuple(f"{TAG_PREFIX}{mode.value}," for mode in (Mode.EXTEND, Mode.TIME_MIN))


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
    state: str = RUNNING
    restarts: int = 0  # times Slurm requeued it: each run has its own count
    submitted: str = ""  # its submit time as squeue prints it: a job id may name another job later
    deadline: float | None = None  # unix seconds: Slurm started it to end by then (--deadline)
    lowered_to: int | None = None  # a limit its user or an admin lowered it to (guard.lowered_limits)
    # The limit it waited at, above the tag's own, as it started (its user raised it while pending):
    # its own limit instead of the tag's (guard.lowered_limits).
    raised_to: int | None = None
    # Listed again with a higher limit in the same listing (merge_duplicates): an extension goes past
    # it, so that no `scontrol update` sets a limit below either line's.
    listed_above: int | None = None
    # Its association (guard.associations): the cluster it runs on, its account and its user.
    cluster: str = ""
    account: str = ""
    user: str = ""

    @property
    def own_limit_minutes(self) -> int | None:
        """The user's own limit when harp shortened the job (or set its time_min) and may extend it:
        the tag's, or the higher one the job waited at as it started, then the lower one its user or
        an admin set (guard.lowered_limits)."""
        own = None if self.tag is None else self.tag.extendable_minutes
        if own is None:
            return None
        if self.raised_to is not None:
            own = max(own, self.raised_to)
        return own if self.lowered_to is None else min(own, self.lowered_to)

    @property
    def limit_over_a_year(self) -> bool:
        """Its limit printed INVALID: over a year, and not known (see the module's note)."""
        return self.limit_minutes is not None and self.limit_minutes > YEAR_MINUTES

    @property
    def shortened(self) -> bool:
        """Below its own limit, and the guard's to extend: not over a year (see the module's note)."""
        own, limit = self.own_limit_minutes, self.limit_minutes
        return own is not None and limit is not None and limit < own and not self.limit_over_a_year

    @property
    def prediction_minutes(self) -> int | None:
        return None if self.tag is None else self.tag.values.get("t")


def parse_running(
    text: str, unread: set[str] | None = None, failed: list[int] | None = None
) -> Iterator[RunningJob]:
    """Every parseable line of SQUEUE_ARGV's output; a line that does not parse is logged and
    skipped, whatever it raises (one odd job never stops a poll), its job id added to ``unread``
    when that field reads (what was seen of the job is then kept: guard.lowered_limits) and its
    number to ``failed``."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        parts = line.split(SEPARATOR, len(_FIELDS) - 1)
        running = len(parts) > 1 and _STATE_OF.get(parts[1].strip()) == RUNNING
        if len(parts) > 1 and not running and not any(t in parts[-1] for t in _FOLLOWED):
            continue  # not running, and no tag of a job the guard may extend
        try:
            job = _job(parts)
        except RunTimeInvalid as exc:  # Slurm's own word, not a line the guard cannot read
            log.info("squeue line %d skipped: %s", lineno, exc)
            if unread is not None:
                unread.add(parts[0].strip())
            continue
        except Exception as exc:  # ValueError, and OverflowError for a 400-digit duration
            log.warning("squeue line %d skipped: %s: %s", lineno, type(exc).__name__, exc)
            if failed is not None:
                failed.append(lineno)
            job_id = parts[0].strip()
            if unread is not None and (_JOB_ID.fullmatch(job_id) or _ARRAY_RECORD.fullmatch(job_id)):
                unread.add(job_id)
            continue
        yield job


def limit_text(minutes: int) -> str:
    """A limit as scontrol takes it: UNLIMITED for an own limit its user raised to none."""
    return "UNLIMITED" if minutes >= UNLIMITED else str(minutes)


def limit_or_unlimited(job: RunningJob) -> int:
    """The job's limit in minutes, UNLIMITED when it has none."""
    return UNLIMITED if job.limit_minutes is None else job.limit_minutes


def merge_duplicates(jobs: Iterable[RunningJob]) -> tuple[list[RunningJob], set[str]]:
    """One job per id, and the ids listed more than once with lines that differ (logged).

    Slurm lists a job once; two lines of one id (a stale line, a garbled listing) cannot both be
    the job. Neither may be taken for a lowering (guard.lowered_limits keeps what it saw before), and
    the job must neither be killed at the lower limit nor set below the higher one: it is read as
    running if either line is, with the lower limit (due when that one is) and the longer run time,
    and ``listed_above`` the higher limit (an unlimited line: no extension)."""
    by_id: dict[str, list[RunningJob]] = {}
    for job in jobs:
        lines = by_id.setdefault(job.job_id, [])
        if job not in lines:
            lines.append(job)
    merged, ambiguous = [], set()
    for job_id, lines in by_id.items():
        if len(lines) == 1:
            merged.append(lines[0])
            continue
        ambiguous.add(job_id)
        limits = [limit_or_unlimited(j) for j in lines]
        log.warning("job %s listed %d times, limits %s: no lowering read from it", job_id, len(lines), limits)
        base = min(
            lines,
            key=lambda j: (j.state != RUNNING, limit_or_unlimited(j)),
        )
        # A line over a year (its true limit unknown) is taken for none: no extension may go below it.
        highest = UNLIMITED if max(limits) > YEAR_MINUTES else max(limits)
        merged.append(
            dataclasses.replace(
                base,
                elapsed_s=max(j.elapsed_s for j in lines),
                listed_above=highest if highest != base.limit_minutes else None,
            )
        )
    return merged, ambiguous


# What squeue prints for a job with no limit of its own: INFINITE, or NO_VAL (set as it starts).
_NO_LIMIT = frozenset({"UNLIMITED", "INFINITE", "NOT_SET", "Partition_Limit"})
# What squeue prints for a duration over a year or below 0 (see the module's note).
_INVALID = "INVALID"


class RunTimeInvalid(ValueError):
    """A run time squeue printed INVALID: the job's line is skipped, but it read."""


def _job(parts: list[str]) -> RunningJob:
    if len(parts) != len(_FIELDS):
        raise ValueError(f"{len(parts)} fields, expected {len(_FIELDS)}")
    values = [p.strip() for p in parts]
    job_id, shown, restarts, submitted, limit, used, partition, qos = values[:8]
    cluster, account, user, reservation, nodes, deadline, comment = values[8:]
    if not _STATE_CODE.fullmatch(shown):
        raise ValueError(f"job {job_id[:40]!r}: state {shown[:10]!r} does not read")
    state = _STATE_OF.get(shown, UNSETTLED)
    if not (_JOB_ID.fullmatch(job_id) or (state == PENDING and _ARRAY_RECORD.fullmatch(job_id))):
        raise ValueError(f"bad job id {job_id[:40]!r}")
    comment = comment[: -len(SEPARATOR)] if comment.endswith(SEPARATOR) else comment
    if limit in _NO_LIMIT:
        limit_s = None
    elif limit == _INVALID:
        limit_s = OVER_A_YEAR * 60.0
    elif (limit_s := parse_duration_s(limit)) is None:
        # A blank, "N/A", "None"... is a garbled line, not "unlimited": taken for no limit, it
        # would be the highest seen, and the job's true limit next a lowering never extended past.
        raise ValueError(f"job {job_id}: time limit {limit[:40]!r} does not read")
    if used == _INVALID and _JOB_ID.fullmatch(job_id) and state != PENDING:
        raise RunTimeInvalid(f"job {job_id}: run time INVALID (over a year, or started ahead of this clock)")
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
        cluster=cluster,
        account=account,
        user=user,
        reservation=None if reservation in ("", "(null)") else reservation,
        nodes=nodes,
        tag=parse_tag(None if comment == "(null)" else comment),
        state=state,
        restarts=int(restarts),
        submitted=submitted,
        # "N/A": none; "Unknown", "None": Slurm's INFINITE and NO_VAL, none either. Tools run in SLURM_ZONE.
        deadline=None if is_sentinel(deadline) else parse_moment(deadline, SLURM_ZONE),
    )
