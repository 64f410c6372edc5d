"""Advice's domain: what a way of running a job costs the site.

Pure functions on text and numbers (no Slurm tool is run, no gRPC): billing (Slurm's
TRESBillingWeights), partition_table (slurm.conf and scontrol text) and tariff (Slurm's billing
under harp.toml's prices).
"""

from __future__ import annotations

from slurm_harp.advice.billing import Mode, Weights, billed_units, parse_priority_flags, parse_weights
from slurm_harp.advice.partition_table import Partition, PartitionTable, from_scontrol, from_slurm_conf
from slurm_harp.advice.tariff import PartitionPrice, Prices, Tariff

__all__ = [
    "Mode",
    "Partition",
    "PartitionPrice",
    "PartitionTable",
    "Prices",
    "Tariff",
    "Weights",
    "billed_units",
    "from_scontrol",
    "from_slurm_conf",
    "parse_priority_flags",
    "parse_weights",
]
