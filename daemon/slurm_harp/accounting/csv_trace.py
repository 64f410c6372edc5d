"""Read the NREL Eagle job CSV (sacct-style columns, one row per job or array task).

Columns: job_id, user, account, partition, qos, wallclock_req (s), nodes_req, processors_req,
gpus_req, mem_req (MB for the whole job; 0 = not given), submit_time / start_time / end_time
("YYYY-MM-DD HH:MM:SS", read as UTC), run_time (s), state, name, work_dir, submit_line.
A job whose submit, start or end time is at or before 1970 or more than a day after the reading is
a bad line, as in sacct output (fields.time_problem).
Array tasks share their job_id: a job_id seen on several rows marks those rows as array tasks,
whose record ids become "<job_id>_<n>" in file order. The anonymised submit_line is not used.
"""

from __future__ import annotations

import csv
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Protocol

from slurm_harp.accounting.fields import FUTURE_SLACK_S, check_times
from slurm_harp.accounting.read_stats import ReadStats
from slurm_harp.core.job import CENSORING_STATES, FINISHED_STATES, JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.slurm_formats import in_range, is_sentinel

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("job_id", "wallclock_req", "run_time", "state", "submit_time")


def read_csv_trace(
    path: str | Path, stats: ReadStats | None = None, *, now: float | None = None
) -> list[JobRecord]:
    path = Path(path)
    stats = stats if stats is not None else ReadStats(source=str(path))
    # utf-8-sig: a byte-order mark (a spreadsheet's save) is no part of the first column's name.
    with path.open(newline="", encoding="utf-8-sig", errors="replace") as handle:
        return parse_csv_trace(handle, stats, now=now)


def parse_csv_trace(
    lines: Iterable[str], stats: ReadStats | None = None, *, now: float | None = None
) -> list[JobRecord]:
    """``now``: the time of reading (default: the clock's), which a job's times may pass by at most
    FUTURE_SLACK_S."""
    stats = stats if stats is not None else ReadStats(source="csv")
    latest = (time.time() if now is None else now) + FUTURE_SLACK_S
    # strict: a quote left open to the end of the file is an error (else its field silently took
    # every row after it), and so is text after a closing quote.
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise ValueError(f"{stats.source}: the header does not read as CSV: {exc}") from exc
    if header is None:
        raise ValueError(f"{stats.source}: empty CSV")
    columns = [c.strip() for c in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"{stats.source}: not an Eagle job CSV, missing columns {missing}")
    rows: list[tuple[int, dict[str, str]]] = []
    for lineno, row in _rows(reader, stats):
        if len(row) != len(columns):
            stats.bad(lineno, f"{len(row)} fields, header has {len(columns)}", log)
            continue
        rows.append((lineno, dict(zip(columns, (v.strip() for v in row), strict=True))))
    repeats = Counter(values["job_id"] for _, values in rows)
    seen: Counter[str] = Counter()
    records: list[JobRecord] = []
    for lineno, values in rows:
        job_id = values["job_id"]
        seen[job_id] += 1
        is_array = repeats[job_id] > 1
        name = f"{job_id}_{seen[job_id]}" if is_array else job_id
        stats.collect(lineno, partial(_record, values, name, is_array, latest), records, log)
    stats.records += len(records)
    return records


class _Reader(Protocol):  # what of csv.reader's object _rows uses
    line_num: int

    def __next__(self) -> list[str]: ...


def _rows(reader: _Reader, stats: ReadStats) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each row after the header. A row the csv module refuses (a field
    over its 128 KB limit, a quote left open to the end) is a bad line, and the rows after it are
    still read: the csv module raised out of the whole file, and the files after it went unread.
    Rows that span lines (a quoted field holding a line break, or a quote left open until a later
    one) are counted in one warning naming the first: such a row may hold rows of the file."""
    end = reader.line_num
    spanning: list[tuple[int, int]] = []
    while True:
        first = end + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            end = reader.line_num
            stats.lines += 1
            stats.bad(first, str(exc) + _spanned(first, end), log)
            continue
        end = reader.line_num
        stats.lines += 1
        if end > first:
            spanning.append((first, end))
        yield first, row
    if spanning:
        first, end = spanning[0]
        log.warning(
            "%s: %d rows span lines (a quoted field holding a line break, or a quote left open), the "
            "first lines %d-%d: check that none holds rows of the file",
            stats.source,
            len(spanning),
            first,
            end,
        )


def _spanned(first: int, end: int) -> str:
    return f" (lines {first}-{end}: a quote left open there took the rows after it)" if end > first else ""


def _record(values: dict[str, str], job_id: str, is_array: bool, latest: float) -> JobRecord | None:
    state = values["state"].split(" ", 1)[0].upper()
    run = _float(values.get("run_time", ""))
    if state not in FINISHED_STATES or run is None or run <= 0:
        return None
    nodes = _int(values.get("nodes_req", ""))
    wallclock = _float(values["wallclock_req"])
    mem_total = _float(values.get("mem_req", ""))
    request = JobRequest(
        user_name=_text(values.get("user", "")),
        account=_text(values.get("account", "")),
        partition=_text(values.get("partition", "")),
        qos=_text(values.get("qos", "")),
        job_name=_text(values.get("name", "")),
        work_dir=_text(values.get("work_dir", "")),
        time_limit_minutes=math.ceil(wallclock / 60) if wallclock else None,
        mem_per_node_mb=math.ceil(mem_total / (nodes or 1)) if mem_total else None,
        min_cpus=_int(values.get("processors_req", "")) or None,
        min_nodes=nodes or None,
        gpus_per_node=_gpus_per_node(values.get("gpus_req", ""), nodes),
        is_array=is_array,
        submit_time=_time(values["submit_time"]),
    )
    record = JobRecord(
        job_id=job_id,
        request=request,
        state=state,
        elapsed_s=int(run),
        start_time=_time(values.get("start_time", "")),
        end_time=_time(values.get("end_time", "")),
        censored=state in CENSORING_STATES,
    )
    times = (
        ("submit_time", request.submit_time),
        ("start_time", record.start_time),
        ("end_time", record.end_time),
    )
    check_times(((name, t, repr(values.get(name, ""))) for name, t in times), latest)
    return record


def _text(value: str) -> str | None:
    return None if is_sentinel(value) else value


def _float(value: str) -> float | None:
    if is_sentinel(value):
        return None
    number = in_range(float(value), value)
    if number < 0:
        raise ValueError(f"bad number {value!r}")
    return number


def _int(value: str) -> int | None:
    number = _float(value)
    return None if number is None else int(number)


def _gpus_per_node(value: str, nodes: int | None) -> int | None:
    total = _int(value)
    return None if total is None else math.ceil(total / (nodes or 1))


def _time(value: str) -> int | None:
    if is_sentinel(value):
        return None
    return int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp())
