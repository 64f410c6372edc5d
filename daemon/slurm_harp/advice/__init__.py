"""Advice's domain: what a way of running a job costs the site, and how many GPUs a training needs.

Pure functions on text and numbers (no Slurm tool is run, no gRPC): billing (Slurm's
TRESBillingWeights), partition_table (slurm.conf and scontrol text), tariff (Slurm's billing
under harp.toml's prices), survival (a job's run-time distribution), reexecution (HARP's
doubled-limit reruns), quote (the expected cost of one configuration) and gpu_memory (ZeRO's
per-GPU memory). docs/advice.md has the formulas and their sources.
"""

from __future__ import annotations

from slurm_harp.advice.billing import Mode, Weights, billed_units, parse_priority_flags, parse_weights
from slurm_harp.advice.gpu_memory import Fit, Overhead, TrainingFacts, fewest_gpus, model_state_bytes
from slurm_harp.advice.partition_table import Partition, PartitionTable, from_scontrol, from_slurm_conf
from slurm_harp.advice.quote import Allocation, Configuration, Quote, price
from slurm_harp.advice.reexecution import Reexecution, expected_reexecution, next_limit
from slurm_harp.advice.survival import PiecewiseSurvival, PointMasses, RiskCurve, Runtime
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff

__all__ = [
    "Allocation",
    "Configuration",
    "Fit",
    "Mode",
    "Overhead",
    "Partition",
    "PartitionPrice",
    "PartitionTable",
    "PiecewiseSurvival",
    "PointMasses",
    "Prices",
    "Quote",
    "Reexecution",
    "RiskCurve",
    "Runtime",
    "Tariff",
    "TrainingFacts",
    "Weights",
    "billed_units",
    "expected_reexecution",
    "fewest_gpus",
    "from_scontrol",
    "from_slurm_conf",
    "model_state_bytes",
    "next_limit",
    "parse_priority_flags",
    "parse_weights",
    "price",
]
