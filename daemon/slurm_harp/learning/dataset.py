"""Records -> feature matrix and targets, in submit order, and the chronological split.

The feature matrix includes the causal history features (core/history.py): each row sees only
the jobs that had ended by its submit time, exactly as the daemon's HistoryIndex would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_harp.core.features import vectorize
from slurm_harp.core.history import history_matrix
from slurm_harp.core.job import JobRecord
from slurm_harp.core.job_copies import first_copies, say_copies
from slurm_harp.core.tag import as_submitted


@dataclass(frozen=True)
class Dataset:
    """Rows sorted by submit time. Times in seconds, requests in minutes, NaN when unknown."""

    x: np.ndarray  # float32 (n, len(FEATURE_NAMES))
    elapsed_s: np.ndarray
    censored: np.ndarray  # bool: elapsed_s is a lower bound of the true run time
    submit_time: np.ndarray
    end_time: np.ndarray
    requested_min: np.ndarray
    cores: np.ndarray

    def __len__(self) -> int:
        return int(self.elapsed_s.shape[0])

    def take(self, index: np.ndarray) -> Dataset:
        return Dataset(
            x=self.x[index],
            elapsed_s=self.elapsed_s[index],
            censored=self.censored[index],
            submit_time=self.submit_time[index],
            end_time=self.end_time[index],
            requested_min=self.requested_min[index],
            cores=self.cores[index],
        )


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def row_order(records: Sequence[JobRecord]) -> list[int]:
    """Which of ``records`` are build_dataset's rows, in its row order: the indices of the usable
    ones (elapsed > 0), stable by submit time (records without one first), each job once
    (core.job_copies: the same job held under two sources of the job store is one row). A row is
    a copy of its record with the request as submitted, not the record itself: find a job's row by
    its index."""
    return _distinct_usable(records)[0]


def _distinct_usable(records: Sequence[JobRecord]) -> tuple[list[int], int]:
    """(row_order, how many records were left out as a job already counted)."""
    kept, again = first_copies(records)
    usable = [i for i in kept if records[i].elapsed_s > 0]
    usable.sort(key=lambda i: _submit_key(records[i]))
    return usable, again


def _submit_key(record: JobRecord) -> float:
    submit = record.request.submit_time
    return -math.inf if submit is None else submit


def build_dataset(records: Sequence[JobRecord], max_rows: int | None = None) -> Dataset:
    """Usable records (elapsed > 0) sorted by submit time, each job once (row_order); ``max_rows``
    keeps the most recent. Each with its user's own request where its harp tag records one
    (core.tag.as_submitted).

    Records without a submit time cannot be placed in time and are sorted first (oldest); their
    history is NaN. History is computed over all usable records before ``max_rows`` is applied, so
    the oldest kept rows still see the jobs that ended before them.
    """
    order, again = _distinct_usable(records)
    say_copies(again, "trained on")
    usable = [as_submitted(records[i]) for i in order]
    history = history_matrix(usable)
    if max_rows is not None and max_rows > 0:
        usable = usable[-max_rows:]
        history = history[-max_rows:]
    return Dataset(
        x=vectorize([r.request for r in usable], history),
        elapsed_s=np.array([r.elapsed_s for r in usable], dtype=np.float64),
        censored=np.array([r.censored for r in usable], dtype=bool),
        submit_time=np.array([_or_nan(r.request.submit_time) for r in usable], dtype=np.float64),
        end_time=np.array([_or_nan(r.end_time) for r in usable], dtype=np.float64),
        requested_min=np.array([_or_nan(r.request.time_limit_minutes) for r in usable], dtype=np.float64),
        cores=np.array([r.alloc_cpus or r.request.min_cpus or 1 for r in usable], dtype=np.float64),
    )
