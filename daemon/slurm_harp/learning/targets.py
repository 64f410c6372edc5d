"""What is learned for each target, aligned row for row with learning.dataset.build_dataset.

- time: the elapsed run time; censored when the job was stopped at a limit (TIMEOUT, DEADLINE,
  PREEMPTED, NODE_FAIL, OUT_OF_MEMORY in sacct; a run at or past its request in SWF).
- memory: the peak resident memory per node (MaxRSS times the tasks a node ran: accounting.sacct);
  censored when the job ran OUT_OF_MEMORY. A trace's records (SWF) ask and use it per processor:
  `harp evaluate` scores them so, training for the daemon leaves them out (per_node_only).
- cpus: effective CPUs, TotalCPU / elapsed; never censored (a job cannot use more CPUs than it
  holds, but it is not stopped for it either).

Model space is log1p of the label (time: of seconds, the card's "log1p_seconds"; memory: MB;
CPUs: CPUs); a quantile survives this monotone map. Requests and outcomes in the target's unit
(minutes, MB per node, CPUs). The ``outcome`` arrays are read in hindsight (calibration and
metrics); ``weight`` is known at submit time (core.safety_rule.decision_weight).

What each job asked for and used is core.job.JobRecord's (``requested``, ``used``,
``stopped_at_limit``): the same as the evaluation's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from slurm_harp.core.extension import stopped_by_harp
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import decision_weight
from slurm_harp.core.tag import as_submitted, own_cores
from slurm_harp.learning.dataset import Dataset, row_order

# Why per_node_only leaves rows out, as training names it.
PER_PROCESSOR = "per-processor memory from a trace: the daemon serves MB per node"
TRANSFORM = {Target.TIME: "log1p_seconds", Target.MEMORY: "log1p", Target.CPUS: "log1p"}
_TO_MODEL_SCALE = {Target.TIME: 60.0, Target.MEMORY: 1.0, Target.CPUS: 1.0}


def usable_in_order(records: Sequence[JobRecord]) -> list[JobRecord]:
    """The records build_dataset keeps, in its row order (dataset.row_order), as submitted."""
    return [as_submitted(records[i]) for i in row_order(records)]


@dataclass(frozen=True)
class TargetData:
    """One target's arrays for the rows of a Dataset. NaN: unknown."""

    target: Target
    value: np.ndarray  # observed outcome in the target's unit
    censored: np.ndarray  # value is a lower bound
    requested: np.ndarray  # the user's request in the target's unit
    weight: np.ndarray  # decision weight (submit-time), see core.safety_rule.decision_weight
    waste_weight: np.ndarray  # hindsight: turns (limit - value) into core-min / MB-hours / CPU-hours
    cost: np.ndarray  # cores x requested minutes: the E-Loss row cost
    group: np.ndarray  # object array of str: the partition asked for ("" when none)
    # Stopped at a limit harp brought below the user's own (core.extension.stopped_by_harp):
    # censored for the models, which learn a lower bound, but a job the calibration counts as
    # killed by a limit below it.
    # None: no such row.
    stopped_by_harp: np.ndarray | None = field(default=None)
    # Memory asked and used per processor (core.job.JobRecord.per_processor_memory: a trace's
    # records). None: no such row.
    per_processor: np.ndarray | None = field(default=None)

    def __len__(self) -> int:
        return int(self.value.shape[0])

    def take(self, index: np.ndarray) -> TargetData:
        return TargetData(
            target=self.target,
            value=self.value[index],
            censored=self.censored[index],
            requested=self.requested[index],
            weight=self.weight[index],
            waste_weight=self.waste_weight[index],
            cost=self.cost[index],
            group=self.group[index],
            stopped_by_harp=None if self.stopped_by_harp is None else self.stopped_by_harp[index],
            per_processor=None if self.per_processor is None else self.per_processor[index],
        )

    def labelled(self) -> np.ndarray:
        """Rows with a positive observed value: the ones a model can learn from."""
        with np.errstate(invalid="ignore"):
            mask: np.ndarray = np.isfinite(self.value) & (self.value > 0)
        return mask

    def to_model(self, values: np.ndarray) -> np.ndarray:
        """Target unit -> model space (log1p of seconds for time)."""
        out: np.ndarray = np.log1p(np.asarray(values, dtype=np.float64) * _TO_MODEL_SCALE[self.target])
        return out

    def from_model(self, raw: np.ndarray) -> np.ndarray:
        """Model space -> target unit, clamped at 0 (what model.card.to_unit does in the daemon)."""
        out: np.ndarray = np.maximum(np.expm1(np.asarray(raw, dtype=np.float64)), 0.0)
        return out / _TO_MODEL_SCALE[self.target]


def _row(record: JobRecord, target: Target) -> tuple[float, bool, float | None, float]:
    """(value, censored, request, hindsight waste weight) of one record."""
    used = record.used(target)
    value = math.nan if used is None else used
    hours = record.elapsed_s / 3600.0
    waste_weight = {
        Target.TIME: own_cores(record),  # the CPUs its user asked for, as the evaluation's waste
        Target.MEMORY: record.limit_units(target) * hours,
        Target.CPUS: hours,
    }[target]
    return value, record.stopped_at_limit(target), record.requested(target), waste_weight


def target_data(
    records: Sequence[JobRecord], data: Dataset, target: Target, max_rows: int | None = None
) -> TargetData:
    """``target``'s arrays for the rows of ``data`` = build_dataset(records, max_rows).
    Raises ValueError when the rows do not line up."""
    rows = usable_in_order(records)
    if max_rows is not None and max_rows > 0:
        rows = rows[-max_rows:]
    elapsed = np.array([r.elapsed_s for r in rows], dtype=np.float64)
    if elapsed.shape != data.elapsed_s.shape or not np.array_equal(elapsed, data.elapsed_s):
        raise ValueError("records are not the rows of this dataset (order or filter differs)")
    n = len(rows)
    value, requested, waste_weight, weight, cost = (np.full(n, math.nan) for _ in range(5))
    censored = np.zeros(n, dtype=bool)
    by_harp = np.zeros(n, dtype=bool)
    group = np.array([r.request.partition or "" for r in rows], dtype=object)
    per_processor = np.array([target is Target.MEMORY and r.per_processor_memory for r in rows], dtype=bool)
    for i, record in enumerate(rows):
        v, c, q, w = _row(record, target)
        value[i], censored[i], waste_weight[i] = v, c, w
        by_harp[i] = c and stopped_by_harp(record, target)
        requested[i] = math.nan if q is None else q
        weight[i] = decision_weight(target, record.request, record.per_processor_memory)
        minutes = record.request.time_limit_minutes
        cost[i] = record.cores * float(minutes or 1)
    return TargetData(
        target, value, censored, requested, weight, waste_weight, cost, group, by_harp, per_processor
    )


def per_node_only(td: TargetData) -> tuple[TargetData, int]:
    """``td`` with its per-processor rows neither labelled nor asking anything, so that no model
    learns them and no rule is calibrated on them, and how many there were. The daemon serves MB
    per node: a model of a trace's MB per processor, served so, cut a job asking 16 x 2000 MB to
    1646 MB. (`harp evaluate` keeps them: there request and use are both per processor.)"""
    left = td.per_processor
    if left is None or not left.any():
        return td, 0
    value, requested = np.where(left, math.nan, td.value), np.where(left, math.nan, td.requested)
    return replace(td, value=value, requested=requested), int(left.sum())


def available(td: TargetData, minimum: int) -> bool:
    """Whether at least ``minimum`` rows have both an observed value and a request."""
    with np.errstate(invalid="ignore"):
        return int(np.sum(td.labelled() & (td.requested > 0))) >= minimum
