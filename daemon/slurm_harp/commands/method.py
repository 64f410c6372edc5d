"""The training method as the commands give it: its defaults as command-line text, their parsers,
and the learning side's MethodConfig they make. `harp train` reads them from its options, `harp
nightly` from these defaults and `harp evaluate` shares the boosting ones."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from slurm_harp.commands.arguments import count_to
from slurm_harp.config.settings import MAX_THREADS, MAX_TREES
from slurm_harp.core.safety_rule import BY

if TYPE_CHECKING:
    from slurm_harp.learning.fitting import MethodConfig

# The method's defaults, as command-line text (harp nightly parses the same strings).
QUANTILES = "0.5,0.7,0.8,0.9,0.95,0.98,0.99"
COMPARE = "huber,eloss,linear,tree,mlp"
SELECT = "upp,ov_mape,1.0"
# booster.BoosterParams' defaults, here so that --help works without the training extra (tested).
TREES = 200
LEARNING_RATE = 0.05
# family.FamilyConfig.ladder_max_rows' default, likewise.
LADDER_ROWS = 100_000
QUANTILE_MIN = 1e-6
trees = count_to(MAX_TREES)  # as training.trees and training.threads are bounded (config.settings)
threads = count_to(MAX_THREADS)


def quantiles(text: str) -> tuple[float, ...]:
    """Quantiles from 0.000001 to 0.999999 with at most six significant digits: a model's file
    and card key hold six (model.card.quantile_file_name: 0.99999999 was named q1, and LightGBM
    failed on it), and LightGBM refuses an alpha that rounds to 0 (1e-320)."""
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(QUANTILE_MIN <= q <= 1.0 - QUANTILE_MIN for q in values):
        raise argparse.ArgumentTypeError(f"quantiles must lie in [0.000001, 0.999999]: {text!r}")
    if not all(float(f"{q:.6g}") == q for q in values):
        raise argparse.ArgumentTypeError(f"quantiles have at most six significant digits: {text!r}")
    return values


def names(text: str) -> tuple[str, ...]:
    from slurm_harp.learning.family import COMPARISON

    picked = tuple(part.strip() for part in text.split(",") if part.strip() and part.strip() != "none")
    unknown = [n for n in picked if n not in COMPARISON]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown models {unknown}; known: {', '.join(COMPARISON)}")
    return picked


def selection(text: str) -> tuple[str, str, float]:
    parts = [part.strip() for part in text.split(",")]
    try:
        primary, secondary, tolerance = parts[0], parts[1], float(parts[2]) if len(parts) > 2 else 0.0
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError(f"expected PRIMARY,SECONDARY[,TOLERANCE]: {text!r}") from None
    from slurm_harp.learning.selection import METRICS

    if primary not in METRICS or secondary not in METRICS or not tolerance >= 0:
        raise argparse.ArgumentTypeError(
            f"expected PRIMARY,SECONDARY[,TOLERANCE >= 0] with metrics among {', '.join(METRICS)}: {text!r}"
        )
    return primary, secondary, tolerance


def method_config(
    quantiles: tuple[float, ...],
    compare: tuple[str, ...],
    select: tuple[str, str, float],
    kill_budget: float,
    floor: float,
    threads: int,
    trees: int = TREES,
    learning_rate: float = LEARNING_RATE,
    ladder_rows: int = LADDER_ROWS,
    calibrate_by: str = BY[0],
) -> MethodConfig:
    # Imported here so that the daemon's own commands work without the training extra installed.
    from slurm_harp.learning.booster import BoosterParams
    from slurm_harp.learning.calibration import CalibrationConfig
    from slurm_harp.learning.family import FamilyConfig
    from slurm_harp.learning.fitting import MethodConfig
    from slurm_harp.learning.selection import SelectionPolicy

    family = FamilyConfig(
        quantiles=quantiles,
        compare=compare,
        ladder_max_rows=ladder_rows,
        params=BoosterParams(n_jobs=max(1, threads)),
    )
    return MethodConfig(
        family=family.boosted(trees, learning_rate),
        selection=SelectionPolicy(*select),
        calibration=CalibrationConfig(kill_budget=kill_budget, floor=floor, by=calibrate_by),
    )
