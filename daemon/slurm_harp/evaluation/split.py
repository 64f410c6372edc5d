"""Chronological train / validation / test windows over a job list.

Jobs are ordered by submit time and never shuffled across time: strategies learn on the first
window, choose and calibrate on the second, and are reported on the last one. Each job is read with
the request its user submitted (core.tag.as_submitted): on a site's own jobs, accounting shows
the limit harp set where it lowered one, which would make harp's limit every strategy's baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_harp.core.job import JobRecord, ended_by
from slurm_harp.core.tag import as_submitted
from slurm_harp.evaluation.strategy import Split

DEFAULT_FRACTIONS: tuple[float, float] = (0.6, 0.2)


@dataclass(frozen=True)
class Timeline:
    """Usable jobs sorted by submit time, their split, and how many input jobs were left out."""

    jobs: list[JobRecord]
    split: Split
    dropped: int  # run time <= 0 or no submit time: cannot be evaluated or placed in time

    def windows(self) -> dict[str, tuple[int, int]]:
        """Index ranges [first, end) of the three windows."""
        n = len(self.jobs)
        s = self.split
        return {
            "train": (0, s.train_end),
            "validation": (s.train_end, s.validation_end),
            "test": (s.validation_end, n),
        }


def chronological_split(
    jobs: Sequence[JobRecord], fractions: tuple[float, float] = DEFAULT_FRACTIONS
) -> Timeline:
    """Sort usable jobs by submit time (stable), as submitted, and cut them by ``fractions`` =
    (train, validation); the test window is the rest. Jobs with run time <= 0 or no submit time are
    dropped."""
    train, validation = fractions
    if train <= 0 or validation <= 0 or train + validation >= 1:
        raise ValueError(f"fractions {fractions}: need train > 0, validation > 0 and train + validation < 1")
    usable = [as_submitted(j) for j in jobs if j.elapsed_s > 0 and j.request.submit_time is not None]
    usable.sort(key=lambda j: j.request.submit_time or 0)
    n = len(usable)
    train_end = round(n * train)
    validation_end = round(n * (train + validation))
    return Timeline(jobs=usable, split=Split(train_end, validation_end), dropped=len(jobs) - n)


def known_before(jobs: Sequence[JobRecord], end: int) -> np.ndarray:
    """Indices of jobs[:end] whose outcome was known when jobs[end] was submitted.

    As in production, a model fitted at time T only knows jobs that had ended by T
    (core.job.ended_by); a job still running then is left out. A job without an end time cannot
    be placed and is kept.
    """
    if end >= len(jobs) or end == 0:
        return np.arange(min(end, len(jobs)))
    cutoff = jobs[end].request.submit_time
    if cutoff is None:
        return np.arange(end)
    keep = [i for i in range(end) if jobs[i].end_time is None or ended_by(jobs[i].end_time, cutoff)]
    return np.asarray(keep, dtype=np.int64)
