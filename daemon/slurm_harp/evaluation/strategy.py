"""What `harp evaluate` compares: anything that turns past jobs into new limits for later jobs.

A strategy sees the whole chronological job list and must stay causal by itself: a limit for job i may
use only what was known at its submit time (requests of earlier submissions, and outcomes of jobs that
had ENDED before it). Limits are in the target's unit (time: minutes, memory: MB per node, cpus: CPUs);
NaN means "leave the user's request alone".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target


@dataclass(frozen=True, slots=True)
class Split:
    """Indices into the chronological (by submit time) job list: [0, train_end) train,
    [train_end, validation_end) validation (model choice and calibration), [validation_end, n) test."""

    train_end: int
    validation_end: int


class Strategy(Protocol):
    name: str
    target: Target

    def fit(self, jobs: Sequence[JobRecord], split: Split, kill_budget: float) -> None:
        """Learn from jobs[:train_end]; choose and calibrate on jobs[train_end:validation_end] so that at
        most ``kill_budget`` (a fraction, e.g. 0.01) of validation jobs would be newly killed."""
        ...

    def limits(self, jobs: Sequence[JobRecord], start: int) -> np.ndarray:
        """New limits for jobs[start:] (float array of len(jobs) - start), NaN = keep the request."""
        ...
