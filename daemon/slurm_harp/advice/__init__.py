"""Advice's domain: what a way of running a job costs the site, and how many GPUs a training needs.

Pure functions on text and numbers (no Slurm tool is run, no gRPC): billing (Slurm's
TRESBillingWeights), partition_table (scontrol's partitions), tariff (Slurm's billing under
harp.toml's prices), survival (a job's run-time distribution), reexecution (HARP's doubled-limit
reruns), quote (the expected cost of one configuration), gpu_memory (ZeRO's per-GPU memory),
partition_shape (how big a job each partition holds), partition_access (whom it takes jobs from),
site_partitions (table and shape, one scontrol record at a time), candidates (the partitions and
sizes priced), script (a batch script's header as a request), evidence (a user's completed runs of a
job name), sizing (run time and memory by size from them), option (one way of running the job,
priced) and recommend (the advice itself: the candidates and the answers).
docs/advice.md has the formulas and their sources.
"""

from __future__ import annotations

from slurm_harp.advice.billing import Mode, Weights, billed_units, parse_priority_flags, parse_weights
from slurm_harp.advice.evidence import Evidence, Run
from slurm_harp.advice.gpu_memory import Fit, TrainingFacts, fewest_gpus, model_state_bytes
from slurm_harp.advice.option import Option
from slurm_harp.advice.partition_shape import PartitionShape, shapes_from_scontrol
from slurm_harp.advice.partition_table import Partition, PartitionTable, from_scontrol
from slurm_harp.advice.quote import Allocation, Configuration, Quote, price
from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.reexecution import Reexecution, expected_reexecution, next_limit
from slurm_harp.advice.site_partitions import SitePartitions
from slurm_harp.advice.survival import Empirical, PointMasses, Runtime
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff

__all__ = [
    "Advice",
    "Allocation",
    "Ask",
    "Configuration",
    "Empirical",
    "Evidence",
    "Fit",
    "Mode",
    "Option",
    "Partition",
    "PartitionPrice",
    "PartitionShape",
    "PartitionTable",
    "PointMasses",
    "Prices",
    "Quote",
    "Reexecution",
    "Run",
    "Runtime",
    "SitePartitions",
    "Tariff",
    "TrainingFacts",
    "Weights",
    "advise",
    "billed_units",
    "expected_reexecution",
    "fewest_gpus",
    "from_scontrol",
    "model_state_bytes",
    "next_limit",
    "parse_priority_flags",
    "parse_weights",
    "price",
    "shapes_from_scontrol",
]
