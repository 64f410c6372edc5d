"""The site's partitions as Slurm describes them: billing weights, MaxTime and billing mode.

Read from the text of ``scontrol show partition`` (with or without ``--oneliner``) and, for the
mode, the ``PriorityFlags = ...`` line of ``scontrol show config``, never by running a tool (the
daemon runs scontrol: server/advisor.py). An empty TRESBillingWeights is "no weights", as in
slurmctld (the job's CPUs are billed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.advice.billing import Mode, Weights, parse_priority_flags, parse_weights
from slurm_harp.slurm_formats import parse_max_time, scontrol_records

__all__ = [
    "Partition",
    "PartitionTable",
    "from_scontrol",
    "mode_of",
    "partition_of",
]

_CONFIG_FLAGS = re.compile(r"^\s*PriorityFlags\s*=\s*(.*?)\s*$", re.I | re.M)


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    weights: Weights | None = None  # None: no TRESBillingWeights, the job's CPUs are billed
    max_minutes: int | None = None  # MaxTime; None: UNLIMITED (or INFINITE, NONE, ...) or not set


@dataclass(frozen=True, slots=True)
class PartitionTable:
    partitions: Mapping[str, Partition] = field(default_factory=dict)
    mode: Mode = Mode.SUM


def from_scontrol(partitions_text: str, config_text: str = "") -> PartitionTable:
    """The partitions of ``scontrol show partition`` and the mode in ``scontrol show config``'s
    PriorityFlags line (none given: SUM). ValueError names the partition."""
    partitions: dict[str, Partition] = {}
    for block in scontrol_records(partitions_text, "PartitionName"):
        name = block["PartitionName"]
        try:
            partitions[name] = partition_of(block)
        except ValueError as exc:
            raise ValueError(f"scontrol partition {name}: {exc}") from None
    return PartitionTable(partitions, mode_of(config_text))


def mode_of(config_text: str) -> Mode:
    """The billing mode in ``scontrol show config``'s PriorityFlags line (none: SUM)."""
    found = _CONFIG_FLAGS.search(config_text)
    return parse_priority_flags(found.group(1)) if found else Mode.SUM


def partition_of(block: Mapping[str, str]) -> Partition:
    """One partition's billing from its scontrol record (slurm_formats.scontrol_records);
    ValueError names what it cannot read."""
    name = block["PartitionName"]
    values = {key.lower(): value for key, value in block.items()}
    weights_text = values.get("tresbillingweights", "").strip().strip('"')
    try:
        max_minutes = parse_max_time(values.get("maxtime", ""))
    except ValueError as exc:
        raise ValueError(f"MaxTime: {exc}") from None
    return Partition(
        name=name,
        weights=parse_weights(weights_text) if weights_text else None,  # its errors name the field
        max_minutes=max_minutes,
    )
