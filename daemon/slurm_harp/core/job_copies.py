"""Each job once: the one rule by which every reader of many jobs (training, `harp evaluate`,
`harp report`, `harp simulate`, the outcome metrics) leaves out the copies of a job held twice.

A job is its job id and submit time, as the job store keys it within a source
(accounting.store_schema): the same job stored under two sources (saved sacct text imported over
the range the harvest read) is counted once. No job is lost by it: two jobs differ in id or submit
time (a reused id, a requeued run), and a record without a submit time is kept whatever its id (an
SWF trace's unknown time). Of a job's copies the first with a run time (elapsed > 0) is kept, else
its first: training's rows are the jobs with a run time, and a copy without one must not hide the
copy that has it. Mirrored in SQL by accounting.training_window (the nightly's bounded read), which
must change with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from slurm_harp.core.job import JobRecord

log = logging.getLogger(__name__)


def first_copies(records: Sequence[JobRecord]) -> tuple[list[int], int]:
    """(the indices of the records kept, ascending; how many were left out as copies of a job kept)."""
    kept: dict[tuple[str, int], int] = {}  # job -> index of the copy kept
    alone: list[int] = []  # records without a submit time: each kept
    for i, record in enumerate(records):
        submit = record.request.submit_time
        if submit is None:
            alone.append(i)
            continue
        first = kept.setdefault((record.job_id, submit), i)
        if first != i and records[first].elapsed_s <= 0 < record.elapsed_s:
            kept[(record.job_id, submit)] = i
    order = sorted([*kept.values(), *alone])
    return order, len(records) - len(order)


def each_job_once(records: Iterable[JobRecord], counted: str) -> list[JobRecord]:
    """``records`` without the copies first_copies leaves out, in their order; one warning says how
    many jobs were held twice and that each is ``counted`` ("trained on", "evaluated") once."""
    records = list(records)
    order, again = first_copies(records)
    say_copies(again, counted)
    return [records[i] for i in order]


def say_copies(again: int, counted: str) -> None:
    """The one warning of ``again`` (> 0) copies left out: the job store holds them, nothing is lost."""
    if again:
        log.warning(
            "%d jobs are held twice (the same job id and submit time, under two sources of the job "
            "store: saved sacct text imported over the harvest's range): each is %s once",
            again,
            counted,
        )
