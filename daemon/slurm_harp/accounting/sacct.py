"""Read ``sacct -a -P --noconvert`` output into JobRecords, folding steps into their job.

Units as Slurm 22.05 prints them with --noconvert: ElapsedRaw seconds, TimelimitRaw minutes,
ReqMem MB for the whole job (older releases: a per-node "n" / per-CPU "c" suffix, both read),
MaxRSS bytes on step lines. Submit/Start/End are in the time zone sacct runs in: sacct_runner runs
it in UTC (SLURM_ZONE), which never repeats an hour; a saved sacct file is read in this host's zone.
max_rss_mb is the largest over the steps of MaxRSS times the step's tasks per node (NTasks over
NNodes, rounded up; 1 where either is missing, as in files saved before harp asked for NTasks):
MaxRSS is the peak of one task, and 16 MPI tasks of 1 GB on a node hold 16 GB there. The product
bounds the node's peak from above (the tasks' peaks need not coincide), never from below: memory
is cut toward it (rewrite mode) and advised from it.
Record ids are JobIDRaw (unique per array task and het component); JobID tells array tasks.
A JobIDRaw is not unique over time: an id given again (MaxJobId wrapped, slurmctld started without
its state) and each run of a requeued job are accounting records of their own, with their own Submit.
sacct shows only the newest record of an id unless given --duplicates, which sacct_runner gives; each
job line is a record, and the step lines after it are its steps.
Rows split or widened by a newline or delimiter inside a free-text field are repaired (or counted
as bad) by sacct_lines.split_rows. harp runs sacct with a delimiter of its own for each run
(sacct_lines.fresh_delimiter), which no user text can hold; a saved file's is read from its header.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import tzinfo

from slurm_harp.accounting.fields import (
    FUTURE_SLACK_S,
    SLURM_ZONE,
    check_times,
    parse_limit_minutes,
    parse_time,
)
from slurm_harp.accounting.read_stats import ReadStats
from slurm_harp.accounting.sacct_lines import FREE_TEXT, JOB_ID, split_rows
from slurm_harp.core.job import CENSORING_STATES, FINISHED_STATES, JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.core.tag import last_tag
from slurm_harp.slurm_formats import (
    gpus_in_tres,
    is_sentinel,
    parse_count,
    parse_duration_s,
    parse_int,
    parse_size_mb,
    parse_tres,
)

log = logging.getLogger(__name__)


@dataclass
class _Job:
    record: JobRecord
    max_rss_mb: float | None
    total_cpu_s: float | None
    step_rss_mb: list[float] = field(default_factory=list)
    step_cpu_s: list[float] = field(default_factory=list)


def read_sacct(
    lines: Iterable[str],
    stats: ReadStats | None = None,
    *,
    zone: tzinfo | None = None,
    delimiter: str | None = None,
    now: float | None = None,
) -> list[JobRecord]:
    """Parse pipe-separated sacct output whose first line is the header; its times are in ``zone``
    (SLURM_ZONE for a runner's output; None: this host's local zone, for a saved file).
    ``delimiter``: the one sacct was run with (None: read from the header, for a saved file).
    ``now``: the time of reading (default: the clock's); a finished job submitted, started or
    ended more than FUTURE_SLACK_S after it is a bad line.

    Only finished jobs with ElapsedRaw > 0 become records. MaxRSS is the maximum over the job's
    steps (the job line carries none); TotalCPU is the job line's (the sum over steps).
    """
    stats = stats if stats is not None else ReadStats(source="sacct")
    header, rows = split_rows(lines, stats, delimiter)
    if header is None:
        raise ValueError(f"{stats.source}: no sacct header line")
    latest = (time.time() if now is None else now) + FUTURE_SLACK_S
    jobs: list[_Job] = []
    # Each id's latest job line, whose steps follow it (None: not usable: unfinished, zero elapsed).
    newest: dict[str, _Job | None] = {}
    for lineno, values in rows:
        row = _Row(header.columns, values)
        try:
            key, step = _ids(row)
            if step is None:
                newest[key] = None  # a bad job line's steps must not join the id's earlier record
                job = newest[key] = _job(key, row, zone, latest=latest)
                if job is None:
                    stats.skipped += 1
                else:
                    jobs.append(job)
            elif key in newest:
                _add_step(newest[key], row)
            else:
                _add_step(None, row)  # still validated: a garbled step line is a bad line
                stats.skipped += 1  # sacct lists a job before its steps; a lone step has no job
        except ValueError as exc:
            stats.bad(lineno, str(exc), log)
    records = [_finish(job) for job in jobs]
    stats.records += len(records)
    return records


def read_one_job(lines: Iterable[str], job_id: str, delimiter: str | None = None) -> JobRecord | None:
    """Job ``job_id`` (its JobIDRaw) from a runner's sacct output (times in SLURM_ZONE, fields split
    by ``delimiter``), in any state (pending and running too: `harp explain`); None when it is not
    there. Bad lines are logged as by read_sacct."""
    stats = ReadStats(source=f"sacct -j {job_id}")
    header, rows = split_rows(lines, stats, delimiter)
    if header is None:
        raise ValueError(f"{stats.source}: no sacct header line")
    for lineno, values in rows:
        row = _Row(header.columns, values)
        try:
            key, step = _ids(row)
            if step is None and key == job_id:
                job = _job(key, row, SLURM_ZONE, any_state=True)
                return None if job is None else _finish(job)
        except ValueError as exc:
            stats.bad(lineno, str(exc), log)
    return None


class _Row:
    __slots__ = ("_columns", "_values")

    def __init__(self, columns: dict[str, int], values: list[str]) -> None:
        self._columns = columns
        self._values = values

    def get(self, name: str) -> str:
        index = self._columns.get(name)
        return "" if index is None else self._values[index].strip()

    def text(self, name: str) -> str | None:
        if name in FREE_TEXT:  # as the user wrote it, as the plugin sees it: " x " and "None" too
            index = self._columns.get(name)
            return self._values[index] or None if index is not None else None
        value = self.get(name)
        return None if is_sentinel(value) else value


def _ids(row: _Row) -> tuple[str, str | None]:
    """(job key, step name or None). The key is JobIDRaw's job part: unique per array task."""
    raw = row.get("JobIDRaw") or row.get("JobID")
    match = JOB_ID.match(raw)
    if match is None:
        raise ValueError(f"bad job id {raw!r}")
    if row.get("JobIDRaw"):
        return match.group(1), match.group(4)
    return raw.split(".", 1)[0], match.group(4)


def _job(
    key: str, row: _Row, zone: tzinfo | None, any_state: bool = False, latest: float = math.inf
) -> _Job | None:
    """The job of a job line; None for one not finished or that never ran (unless ``any_state``).
    ValueError for a finished job with a time after ``latest``."""
    state = row.get("State").split(" ", 1)[0]  # "CANCELLED by 0" -> CANCELLED
    if not state:
        raise ValueError("empty State")
    elapsed = parse_count(row.get("ElapsedRaw"))
    nnodes = parse_count(row.get("NNodes"))
    req_nodes = parse_count(row.get("ReqNodes"))
    nodes = req_nodes or nnodes or None
    mem_per_node, mem_per_cpu = _memory(row.get("ReqMem"), nodes)
    tres = parse_tres(row.get("ReqTRES"))
    gpus = gpus_in_tres(tres)
    display_id = row.get("JobID")
    request = JobRequest(
        user_name=row.text("User"),
        user_id=parse_int(row.get("UID")),
        account=row.text("Account"),
        partition=row.text("Partition"),
        qos=row.text("QOS"),
        job_name=row.text("JobName"),
        work_dir=row.text("WorkDir"),
        time_limit_minutes=parse_limit_minutes(row.get("TimelimitRaw")),
        mem_per_node_mb=mem_per_node,
        mem_per_cpu_mb=mem_per_cpu,
        min_cpus=parse_count(row.get("ReqCPUS")) or None,
        min_nodes=nodes,
        gpus_per_node=None if gpus is None else math.ceil(gpus / (nodes or 1)),
        is_array="_" in display_id if display_id else None,
        submit_time=parse_time(row.get("Submit"), zone),
    )
    rss = parse_size_mb(row.get("MaxRSS"), bare_unit="")
    record = JobRecord(
        job_id=key,
        request=request,
        state=state,
        elapsed_s=elapsed or 0,
        start_time=parse_time(row.get("Start"), zone),
        end_time=parse_time(row.get("End"), zone),
        alloc_cpus=parse_count(row.get("AllocCPUS")),
        censored=state in CENSORING_STATES,
        harp_tag=last_tag(row.get("AdminComment")),
    )
    if not any_state and (state not in FINISHED_STATES or elapsed is None or elapsed <= 0):
        return None
    times = ("Submit", request.submit_time), ("Start", record.start_time), ("End", record.end_time)
    check_times(((name, moment, row.get(name)) for name, moment in times), latest)
    return _Job(record, None if rss is None else rss[0], parse_duration_s(row.get("TotalCPU")))


def _memory(text: str, nodes: int | None) -> tuple[int | None, int | None]:
    """ReqMem -> (MB per node, MB per CPU). A bare number is the job's total (Slurm >= 21.08)."""
    parsed = parse_size_mb(text, bare_unit="M")
    if parsed is None or parsed[0] <= 0:  # --mem=0 means "all of the node": no number to learn
        return None, None
    mb, flavour = parsed
    if flavour == "c":
        return None, math.ceil(mb)
    if flavour == "n":
        return math.ceil(mb), None
    return math.ceil(mb / (nodes or 1)), None


def _add_step(job: _Job | None, row: _Row) -> None:
    rss = parse_size_mb(row.get("MaxRSS"), bare_unit="")
    cpu = parse_duration_s(row.get("TotalCPU"))
    tasks, nodes = parse_count(row.get("NTasks")), parse_count(row.get("NNodes"))
    if job is None:
        return
    if rss is not None:
        per_node = math.ceil(tasks / nodes) if tasks and nodes else 1
        job.step_rss_mb.append(rss[0] * per_node)
    if cpu is not None:
        job.step_cpu_s.append(cpu)


def _finish(job: _Job) -> JobRecord:
    rss = [*job.step_rss_mb, *([job.max_rss_mb] if job.max_rss_mb is not None else [])]
    cpu = job.total_cpu_s
    if cpu is None and job.step_cpu_s:
        cpu = sum(job.step_cpu_s)
    return replace(job.record, max_rss_mb=max(rss) if rss else None, total_cpu_s=cpu)
