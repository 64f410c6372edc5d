"""The one door between the simulator and the accounting readers: a trace file or the job store
becomes a Workload. Everything else in this package sees only Workloads."""

from __future__ import annotations

import logging
from pathlib import Path

from slurm_harp.accounting import JobRecord, ReadStats, load_records, swf_processors
from slurm_harp.core.job_copies import each_job_once
from slurm_harp.core.tag import as_submitted
from slurm_harp.core.text import question_marks
from slurm_harp.simulation.workload import Workload

log = logging.getLogger(__name__)


def workload_from_records(records: list[JobRecord], processors: int | None, name: str = "jobs") -> Workload:
    """Jobs with a submit time and a run time, each with the request its user submitted
    (core.tag.as_submitted: the job store shows the limit harp set where it lowered one); a job
    with no request gets the longest request in the trace (it could run that long) and is listed in
    the workload's ``no_request``; the machine defaults to the widest job."""
    records = [as_submitted(r) for r in records]
    dropped = {"no submit time": 0, "no processor count": 0}
    rows: list[tuple[str, float, float, float, int, int]] = []
    unasked: list[int] = []
    users: dict[str, int] = {}
    longest = max((r.request.time_limit_minutes or 0 for r in records), default=0) * 60
    if not longest and records:
        # Each job's request would be its own run time: a "requests" row that knows every run time.
        raise ValueError("no job has a time limit (UNLIMITED or none): the requests are unknown")
    for record in records:
        req = record.request
        procs = req.min_cpus or record.alloc_cpus
        if req.submit_time is None:
            dropped["no submit time"] += 1
            continue
        if not procs:
            dropped["no processor count"] += 1
            continue
        limit = req.time_limit_minutes * 60 if req.time_limit_minutes else longest or record.elapsed_s
        user = users.setdefault(req.user_name or f"#{record.job_id}", len(users))
        if not req.time_limit_minutes:
            unasked.append(len(rows))
        rows.append((record.job_id, req.submit_time, record.elapsed_s, limit, procs, user))
    size = processors or max((row[4] for row in rows), default=1)
    workload = Workload.build(size, rows, name=name, no_request=unasked)
    if not len(workload):  # a schedule of nothing: every metric NaN, said as a result before
        why = [f"{v} with {k}" for k, v in dropped.items() if v]
        if wide := len(rows):  # Workload.build dropped them all
            why.append(f"{wide} wider than the machine of {size} processors")
        said = f" ({'; '.join(why)})" if why else ""
        raise ValueError(f"no job to replay: {len(records)} jobs read{said}")
    workload.dropped.update({k: v for k, v in dropped.items() if v})
    return workload


def trace_name(source: str | Path) -> str:
    """The trace's file name without its suffixes, as text: each byte that is not UTF-8 (held as a
    surrogate, which no encoder or font takes) as "?" (core.text's rule), for a plot's title, an
    output's file name; "jobs" when nothing is left."""
    name = Path(source).name
    for suffix in (".gz", ".swf", ".csv", ".txt", ".sqlite", ".db"):
        name = name.removesuffix(suffix)
    return question_marks(name) or "jobs"


def load_workload(source: str | Path, processors: int | None = None, *, db: bool = False) -> Workload:
    """Read an SWF (.swf/.swf.gz), Eagle CSV (.csv) or `sacct -P` text file, or with ``db`` the
    job store (SQLite), each job once (core.job_copies: a job held under two sources was replayed
    twice); ``processors`` overrides the size an SWF header declares."""
    path = Path(source)
    if db:
        from slurm_harp.accounting.jobstore import JobStore

        with JobStore(path, readonly=True) as store:  # the harvest and the daemon may be using it
            records = each_job_once(store.records(), "replayed")
    else:
        stats = ReadStats(source=str(path))
        records = load_records(path, stats)
        log.info("%s", stats.summary())
    return workload_from_records(records, processors or swf_processors(path), name=trace_name(path))
