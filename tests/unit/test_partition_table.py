"""advice.partition_table: scontrol text into partitions, MaxTime and the mode."""

from __future__ import annotations

import pytest

from slurm_harp.advice.billing import Mode
from slurm_harp.advice.partition_table import from_scontrol

SCONTROL = """PartitionName=debug
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   MaxNodes=UNLIMITED MaxTime=01:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   TRES=cpu=4,mem=7940M,node=1,billing=4

PartitionName=gpu
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   MaxNodes=UNLIMITED MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   TRES=cpu=64,mem=500G,node=2,billing=64,gres/gpu=8
   TRESBillingWeights=CPU=1.0,Mem=0.25G,GRES/gpu=8
"""

CONFIG = """Configuration data as of 2026-01-01T00:00:00
PriorityDecayHalfLife   = 7-00:00:00
PriorityFlags           = CALCULATE_RUNNING,MAX_TRES_GRES
PriorityMaxAge          = 7-00:00:00
"""


def test_scontrol_partition_names_keep_their_case_and_empty_weights_bill_cpus() -> None:
    table = from_scontrol(
        "PartitionName=batch MaxTime=1-00:00:00 TRESBillingWeights=CPU=1.0,Mem=0.25G\n"
        "PartitionName=Batch MaxTime=UNLIMITED TRESBillingWeights=CPU=2\n"
        "PartitionName=all MaxTime=30 TRESBillingWeights=\n"
    )
    assert set(table.partitions) == {"batch", "Batch", "all"}  # names keep their case
    batch, big, every = (table.partitions[n] for n in ("batch", "Batch", "all"))
    assert batch.weights is not None and batch.weights.text == "CPU=1.0,Mem=0.25G"
    assert batch.max_minutes == 1440
    assert big.weights is not None and big.weights.per_unit == {"cpu": 2.0} and big.max_minutes is None
    assert every.weights is None  # empty: "no weights", as slurmctld reads it
    assert every.max_minutes == 30


def test_scontrol_multiline_and_oneliner_agree() -> None:
    table = from_scontrol(SCONTROL, CONFIG)
    oneliner = from_scontrol(SCONTROL.replace("\n   ", " "), CONFIG)
    assert table == oneliner
    assert table.mode is Mode.MAX_TRES_GRES
    assert table.partitions["debug"].weights is None and table.partitions["debug"].max_minutes == 60
    gpu = table.partitions["gpu"]
    assert gpu.weights is not None and gpu.weights.per_unit["gres/gpu"] == 8.0 and gpu.max_minutes == 2880


def test_scontrol_without_config_text_is_sum_and_errors_name_the_partition() -> None:
    assert from_scontrol(SCONTROL).mode is Mode.SUM
    with pytest.raises(ValueError, match=r"scontrol partition gpu: TRESBillingWeights"):
        from_scontrol(SCONTROL.replace("GRES/gpu=8", "GPU=8"))
