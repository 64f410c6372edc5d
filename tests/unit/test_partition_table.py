"""advice.partition_table: slurm.conf and scontrol text into partitions, MaxTime and the mode."""

from __future__ import annotations

import pytest

from slurm_harp.advice.billing import Mode
from slurm_harp.advice.partition_table import from_scontrol, from_slurm_conf

SLURM_CONF = r"""
# cluster billing
ClusterName=test
priorityflags=CALCULATE_RUNNING,MAX_TRES   # case-insensitive keys
PartitionName=early Nodes=n[1-2] MaxTime=30
PartitionName=DEFAULT TRESBillingWeights="CPU=1.0,Mem=0.25G" MaxTime=1-00:00:00
PartitionName=batch Nodes=n[1-8] Default=YES
PartitionName=gpu Nodes=g[1-4] \
    TRESBillingWeights="CPU=1.0,Mem=0.25G,GRES/gpu=8" MaxTime=2-00:00:00
PartitionName=Batch Nodes=n9 TRESBillingWeights=CPU=2 MaxTime=UNLIMITED
"""

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


def test_slurm_conf_partitions_defaults_continuations_and_mode() -> None:
    table = from_slurm_conf(SLURM_CONF)
    assert table.mode is Mode.MAX_TRES
    assert set(table.partitions) == {"early", "batch", "gpu", "Batch"}  # names keep their case
    early, batch, gpu, big = (table.partitions[n] for n in ("early", "batch", "gpu", "Batch"))
    # A DEFAULT line gives its values only to the partitions after it that do not set their own.
    assert early.weights is None and early.max_minutes == 30
    assert batch.weights is not None and batch.weights.text == "CPU=1.0,Mem=0.25G"
    assert batch.max_minutes == 1440
    assert gpu.weights is not None and gpu.weights.per_unit["gres/gpu"] == 8.0
    assert gpu.max_minutes == 2880
    assert big.weights is not None and big.weights.per_unit == {"cpu": 2.0} and big.max_minutes is None


def test_slurm_conf_without_flags_or_weights_bills_cpus_by_sum() -> None:
    table = from_slurm_conf("PartitionName=all Nodes=ALL TRESBillingWeights=\n")
    assert table.mode is Mode.SUM
    assert table.partitions["all"].weights is None  # empty: "no weights", as slurmctld reads it
    assert table.partitions["all"].max_minutes is None


def test_slurm_conf_errors_name_the_line_and_partition() -> None:
    with pytest.raises(ValueError, match=r"slurm.conf line 3: partition gpu: TRESBillingWeights .*'GRES=8'"):
        from_slurm_conf("ClusterName=x\n\nPartitionName=gpu TRESBillingWeights=CPU=1,GRES=8\n")
    with pytest.raises(ValueError, match=r"slurm.conf line 2: partition p: time limit '1:2:3:4'"):
        from_slurm_conf("\nPartitionName=p MaxTime=1:2:3:4\n")
    with pytest.raises(ValueError, match=r"slurm.conf line 1: No closing quotation"):
        from_slurm_conf('PartitionName=p TRESBillingWeights="CPU=1\n')


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
