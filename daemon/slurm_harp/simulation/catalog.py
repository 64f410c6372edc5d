"""The schedulers and limit sources by the names the command line and reports use."""

from __future__ import annotations

from collections.abc import Sequence

from slurm_harp.simulation.backfill import (
    BF_INTERVAL,
    BF_MAX_JOB_TEST,
    BF_RESOLUTION,
    BF_WINDOW,
    SlurmBackfill,
)
from slurm_harp.simulation.easy import Easy
from slurm_harp.simulation.engine import Scheduler
from slurm_harp.simulation.limits import LimitSource, PredictedLimits, RequestLimits, TsafrirLimits
from slurm_harp.simulation.workload import Workload

SCHEDULERS = ("easy", "slurm")
LIMITS = ("request", "tsafrir", "easy++", "ours-rewrite", "ours-time_min", "ours-extend")


class NeedsPredictions(ValueError):
    """An ``ours-*`` source was asked for without a prediction per job."""


def scheduler(
    name: str,
    *,
    bf_max_job_test: int = BF_MAX_JOB_TEST,
    bf_resolution: float = BF_RESOLUTION,
    bf_window: float = BF_WINDOW,
    bf_interval: float = BF_INTERVAL,
) -> Scheduler:
    if name == "easy":
        return Easy()
    if name == "slurm":
        return SlurmBackfill(
            bf_max_job_test=bf_max_job_test,
            bf_resolution=bf_resolution,
            bf_window=bf_window,
            bf_interval=bf_interval,
        )
    raise ValueError(f"unknown scheduler {name!r}; one of {', '.join(SCHEDULERS)}")


def limits(
    name: str, workload: Workload, predictions: Sequence[float] | None = None, extension: str = "steps"
) -> LimitSource:
    """A fresh limit source (they keep per-run state: build one per run)."""
    if name == "request":
        return RequestLimits(workload)
    if name in ("tsafrir", "easy++"):
        return TsafrirLimits(workload, shortest_first=name == "easy++")
    if name.startswith("ours-") and name in LIMITS:
        if predictions is None:
            raise NeedsPredictions(f"{name} plans with slurm-harp's predictions: give one per job")
        return PredictedLimits(workload, predictions, name.removeprefix("ours-"), extension=extension)
    raise ValueError(f"unknown limit source {name!r}; one of {', '.join(LIMITS)}")
