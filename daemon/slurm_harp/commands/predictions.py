"""Where `harp simulate` gets ours' predictions: a file a site gives (JSON or CSV, job id -> seconds),
or models fitted along the trace as nightly retraining would fit them."""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from slurm_harp.core.policy import Policy
from slurm_harp.regular_file import decode_json, read_regular

log = logging.getLogger(__name__)

# The largest file of predictions read: room for ten million jobs at 26 bytes each (a CSV line
# `12345678,123456.5` takes 18); a runaway file was read until memory ran out.
MAX_BYTES = 256 * 2**20


def read_predictions(path: Path) -> dict[str, float]:
    """Job id -> planned limit in seconds, from JSON (an object) or CSV (job_id,seconds; a first row
    of two names, neither a number, is a header). Each limit is a finite number >= 0; anything else
    is a ValueError naming the file and the job or line (an infinite one ended in a traceback deep
    in the simulation). A job id given twice with two limits is a ValueError naming both (the last
    was taken without a word); with the same limit, one warning (_Limits). Only a regular file is
    read (regular_file: a FIFO was waited on for good), of at most MAX_BYTES (ValueError)."""
    raw = read_regular(path, size=MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{path}: larger than {MAX_BYTES} bytes, the most harp reads of predictions")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from None
    limits = _Limits(path)
    if path.suffix.lower() == ".json":
        try:
            data = decode_json(text, object_pairs_hook=_Object)
        except ValueError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(data, _Object):
            raise ValueError(f"{path}: expected a JSON object of job id -> seconds")
        for k, v in data.pairs:
            limits.add(k, _seconds(v, f"{path}: job {k}"))
        return limits.read()
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or (lineno == 1 and _is_header(row)):
            continue
        if len(row) != 2 or not _is_number(row[1]):
            raise ValueError(f"{path}:{lineno}: expected job_id,seconds")
        limits.add(row[0].strip(), _seconds(float(row[1]), f"{path}:{lineno}"), lineno)
    return limits.read()


class _Object(dict[str, Any]):
    """A JSON object that keeps its (key, value) pairs as written: a key given twice among them."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs


class _Limits:
    """Job id -> seconds as a file lists them, each id once. An id listed again with another limit
    is a ValueError naming both: which one the site meant no reader can tell, and the last was taken
    without a word. Listed again with the same limit it is taken once, said in one warning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.by_id: dict[str, float] = {}
        self.first: dict[str, int | None] = {}  # id -> the CSV line it was first listed on
        self.again: dict[str, None] = {}  # ids listed again with the same limit, in order

    def add(self, job: str, seconds: float, line: int | None = None) -> None:
        """``job``'s limit, listed on CSV ``line`` (None: in JSON)."""
        if job not in self.by_id:
            self.by_id[job], self.first[job] = seconds, line
        elif self.by_id[job] != seconds:
            where = self.path if line is None else f"{self.path}:{line}"
            before = "before" if line is None else f"line {self.first[job]}"
            raise ValueError(
                f"{where}: job {job[:40]!r} listed again with another limit, {seconds:g} s "
                f"({before}: {self.by_id[job]:g} s)"
            )
        else:
            self.again[job] = None

    def read(self) -> dict[str, float]:
        if self.again:
            count = len(self.again)
            log.warning(
                "%s: %s job id%s listed again with the same limit, taken once: %s",
                self.path,
                f"{count:,}",
                "s" * (count != 1),
                _first_few(list(self.again)),
            )
        return self.by_id


def _first_few(jobs: list[str]) -> str:
    """The first five of ``jobs`` for a log line, each cut to 40 characters."""
    return ", ".join(repr(job[:40]) for job in jobs[:5]) + (", ..." if len(jobs) > 5 else "")


def check_matched(path: Path, by_id: Mapping[str, float], ids: Collection[str], replayed: str) -> None:
    """A file made for another trace (or another --max-jobs slice) named no job replayed: every
    ours-* row was the request's, exit 0, nothing said. None of its job ids among ``ids`` (the jobs
    ``replayed`` names) is a ValueError; some missing, a warning with the count and the first few
    (a file for a whole trace run on a slice is fine)."""
    if not by_id:
        raise ValueError(f"{path}: holds no prediction")
    known = set(ids)
    unmatched = [job for job in by_id if job not in known]
    if len(unmatched) == len(by_id):
        raise ValueError(f"{path}: none of its {len(by_id):,} job ids is a job replayed from {replayed}")
    if unmatched:
        log.warning(
            "%s: %s of its %s job ids left unused, no job replayed from %s: %s",
            path,
            f"{len(unmatched):,}",
            f"{len(by_id):,}",
            replayed,
            _first_few(unmatched),
        )


def _seconds(value: object, where: str) -> float:
    """A planned limit: a number (not true/false, nor text) finite and >= 0."""
    seconds = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # a JSON integer of 400 digits stays NaN
            seconds = float(value)
    if not 0.0 <= seconds < math.inf:
        raise ValueError(f"{where}: expected a finite number of seconds >= 0, not {str(value)[:40]!r}")
    return seconds


def _is_header(row: list[str]) -> bool:
    """Two names, neither a number (`job_id,seconds`): a garbled first job (`19,600,oops`, `19,x`)
    was taken for a header and dropped without a word, where the same row later is refused."""
    return len(row) == 2 and not any(_is_number(field) for field in row)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def fitted_predictions(
    args: argparse.Namespace,
    jobs: set[tuple[str, float]],
    policy: Policy,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, dict[tuple[str, float], float]]:
    """Per ours-* source, (job id, submit time) of each of ``jobs`` -> predicted limit (seconds) from
    models fitted along the trace on the jobs ended by then (evaluation.rolling): the calibrated rule
    for rewrite, whose limit kills; the --quantile model (the median by default) for time_min and
    extend, where the user's own limit still holds and `harp guard` extends a job that reaches the
    prediction. None for a cold user's job when ``policy.require_history``, as the daemon keeps its
    request. A job is its id and submit time: a job store may hold several jobs of one id.
    ``progress(done, total)`` is told after each fit."""
    from slurm_harp.accounting import load_records
    from slurm_harp.accounting.jobstore import JobStore
    from slurm_harp.core.job import JobRecord
    from slurm_harp.evaluation.rolling import served_limits

    if args.db:
        with JobStore(args.source, readonly=True) as store:  # fits, never writes
            records = list(store.records())
    else:
        records = load_records(args.source)

    def job(r: JobRecord) -> tuple[str, float]:
        return r.job_id, float(r.request.submit_time or 0)

    usable = [r for r in records if r.request.submit_time is not None and job(r) in jobs and r.elapsed_s > 0]
    usable.sort(key=lambda r: r.request.submit_time or 0)
    served = served_limits(usable, period_days=args.period_days, progress=progress, quantile=args.quantile)
    print(f"ours: {served.fits} fits, one every {args.period_days:g} days after the first 20 % of jobs")
    kept = served.cold & policy.require_history
    if policy.require_history:
        print(f"ours: {int(kept.sum()):,} jobs of users with no job ended lately keep their request")

    def served_s(values: Iterable[float]) -> dict[tuple[str, float], float]:
        return {
            job(r): 60.0 * m
            for r, m, cold in zip(usable, values, kept, strict=True)
            if not (math.isnan(m) or cold)
        }

    rule, planned = served_s(served.rule), served_s(served.quantile)
    ours = [name for name in args.limits if name.startswith("ours-")]
    return {name: rule if name == "ours-rewrite" else planned for name in ours}
