"""Read Standard Workload Format traces (Parallel Workloads Archive), plain or gzipped.

Mapping onto JobRequest (SWF has ids, not names):
- user id -> user_name "u<id>", group id -> account "g<id>", queue id -> partition "q<id>"
  (partition id "p<id>" when the queue is unknown), executable id -> job_name "app<id>".
- requested time (s) -> time_limit_minutes (ceil); requested processors (else allocated) -> min_cpus;
  requested memory (KB per processor) -> mem_per_cpu_mb (ceil).
- SWF does not tell nodes. The archive's SP2 and CM-5 machines had one processor per node, so
  "used memory per processor" is taken as the peak per node: max_rss_mb = KB / 1024. On a trace
  of multi-processor nodes this under-states the per-node peak.
- Times: SWF submit times are relative to the header's UnixStartTime, which is added when present.
  A job whose submit, start or end time is before 1970 or more than a day after the reading
  (fields.time_problem, as the sacct reader checks them) is a bad line: a UnixStartTime in
  milliseconds put jobs in the year 27969. Time 0 is no error here: a trace without UnixStartTime
  counts from its log's start, and its first job is submitted at 0.
- A job whose run time reached its request was stopped at (or ran past) its limit: censored.
"""

from __future__ import annotations

import gzip
import logging
import math
import time
import zlib
from collections.abc import Generator, Iterable
from functools import partial
from pathlib import Path

from slurm_harp.accounting.bounded_lines import bounded_lines
from slurm_harp.accounting.fields import FUTURE_SLACK_S, check_times
from slurm_harp.accounting.read_stats import ReadStats
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.slurm_formats import in_range

log = logging.getLogger(__name__)

SWF_FIELDS = 18
_STATUS = {1: "COMPLETED", 0: "FAILED", 5: "CANCELLED"}


def read_swf(
    path: str | Path, stats: ReadStats | None = None, *, now: float | None = None
) -> list[JobRecord]:
    path = Path(path)
    stats = stats if stats is not None else ReadStats(source=str(path))
    return parse_swf(swf_lines(path, stats), stats, now=now)


def swf_lines(path: Path, stats: ReadStats | None = None) -> Generator[str, None, None]:
    """The lines of a trace, gunzipped when its name ends in .gz (any case), each up to a cap
    (``bounded_lines``: a longer one is a bad line in ``stats``). A damaged compressed file
    (truncated, corrupt, not gzip) is a ValueError naming it: gzip's own errors name no file, and
    a truncated one is an EOFError that no caller expects."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
            yield from bounded_lines(handle, stats)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: damaged compressed trace: {exc}") from exc


def swf_processors(path: str | Path) -> int | None:
    """The machine size an SWF header declares (MaxProcs, else MaxNodes), or None."""
    path = Path(path)
    if not path.name.lower().endswith((".swf", ".swf.gz")):
        return None
    found: dict[str, int] = {}
    lines = swf_lines(path)
    for line in lines:
        if not line.startswith(";"):
            break
        key, sep, value = line.lstrip("; \t").partition(":")
        words = value.split()
        number = words[0] if words else ""
        if sep and key.strip() in ("MaxProcs", "MaxNodes") and number.isascii() and number.isdigit():
            found[key.strip()] = int(number)
    lines.close()  # the file, now: not when the generator is collected
    return found.get("MaxProcs", found.get("MaxNodes"))


def parse_swf(
    lines: Iterable[str], stats: ReadStats | None = None, *, now: float | None = None
) -> list[JobRecord]:
    """``now``: the time of reading (default: the clock's), which a job's times may pass by at most
    FUTURE_SLACK_S."""
    stats = stats if stats is not None else ReadStats(source="swf")
    latest = (time.time() if now is None else now) + FUTURE_SLACK_S
    start_offset = 0
    records: list[JobRecord] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(";"):
            start_offset = _header_start(line, start_offset)
            continue
        stats.lines += 1
        stats.collect(lineno, partial(_record, line, start_offset, latest), records, log)
    stats.records += len(records)
    return records


def _header_start(line: str, current: int) -> int:
    key, sep, value = line.lstrip("; \t").partition(":")
    if sep and key.strip() == "UnixStartTime":
        try:
            return in_range(int(value.strip()), value)
        except ValueError:
            return current
    return current


def _number(text: str) -> float:
    return in_range(float(text), text)


def _known(value: float) -> float | None:
    """SWF writes -1 for unknown."""
    return None if value < 0 else value


def _record(line: str, start_offset: int, latest: float) -> JobRecord | None:
    parts = line.split()
    if len(parts) != SWF_FIELDS:
        raise ValueError(f"{len(parts)} fields, SWF has {SWF_FIELDS}")
    f = [_number(p) for p in parts]
    job, submit, wait, run, alloc, cpu_avg, used_mem, req_procs, req_time, req_mem = f[:10]
    status, user, group, app, queue, partition = f[10:16]
    if run <= 0:
        return None
    procs = _known(req_procs) or _known(alloc)
    request = JobRequest(
        user_name=_name("u", user),
        user_id=int(user) if user >= 0 else None,
        account=_name("g", group),
        partition=_name("q", queue) or _name("p", partition),
        job_name=_name("app", app),
        time_limit_minutes=math.ceil(req_time / 60) if req_time > 0 else None,
        mem_per_cpu_mb=math.ceil(req_mem / 1024) if req_mem > 0 else None,
        min_cpus=int(procs) if procs else None,
        submit_time=int(submit) + start_offset if submit >= 0 else None,
    )
    start = request.submit_time + int(wait) if request.submit_time is not None and wait >= 0 else None
    end = None if start is None else start + int(run)
    times = ("submit time", request.submit_time), ("start time", start), ("end time", end)
    check_times(((name, t, f"{t} (unix seconds)") for name, t in times), latest, earliest=0)
    alloc_cpus = int(alloc) if alloc > 0 else None
    return JobRecord(
        job_id=str(int(job)),
        request=request,
        state=_STATUS.get(int(status), "UNKNOWN"),
        elapsed_s=int(run),
        start_time=start,
        end_time=end,
        max_rss_mb=used_mem / 1024 if used_mem >= 0 else None,
        total_cpu_s=cpu_avg * alloc_cpus if cpu_avg >= 0 and alloc_cpus else None,
        alloc_cpus=alloc_cpus,
        censored=req_time > 0 and run >= req_time,
    )


def _name(prefix: str, value: float) -> str | None:
    return f"{prefix}{int(value)}" if value >= 0 else None
