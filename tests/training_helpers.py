"""Training a walltime model in one call, for tests: learning.trainer.train_target for
Target.TIME with a quantile set and booster parameters of the test's choosing. (`harp train`
trains through learning.pipeline, for every target.)"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.family import FamilyConfig
from slurm_harp.learning.fitting import MethodConfig, Refit
from slurm_harp.learning.trainer import TrainingError, TrainResult, train_target


def train_walltime(
    records: Sequence[JobRecord],
    quantiles: Sequence[float] = FamilyConfig().quantiles,
    source: str = "",
    params: BoosterParams | None = None,
    validation_fraction: float = 0.2,
    max_rows: int | None = None,
    config: MethodConfig | None = None,
    refit: Refit = Refit.FULL,
) -> TrainResult:
    """``train_target`` for time with these quantiles and booster parameters."""
    base = config or MethodConfig()
    try:
        family = replace(
            base.family,
            quantiles=tuple(sorted({float(q) for q in quantiles})),
            params=params or base.family.params,
        )
    except ValueError as exc:
        raise TrainingError(str(exc)) from exc
    return train_target(
        records,
        Target.TIME,
        replace(base, family=family),
        source=source,
        validation_fraction=validation_fraction,
        max_rows=max_rows,
        refit=refit,
    )
