"""The site's partitions as Slurm describes them: billing weights, MaxTime and billing mode.

Read from text, never by running a tool (the caller reads the file or runs scontrol):
- ``slurm.conf``: ``PartitionName=...`` lines (a ``PartitionName=DEFAULT`` line sets values for
  the partitions after it that do not set their own) and the ``PriorityFlags`` line. Keys are
  case-insensitive, partition names are not; ``#`` starts a comment; a line ending in ``\\``
  continues on the next; values may be double-quoted. ``Include`` lines are not followed: give
  the included text too (or use ``scontrol show partition``, which has it all).
- ``scontrol show partition`` (with or without ``--oneliner``) and, for the mode, the
  ``PriorityFlags = ...`` line of ``scontrol show config``.
An empty TRESBillingWeights is "no weights", as in slurmctld (the job's CPUs are billed).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.advice.billing import Mode, Weights, parse_priority_flags, parse_weights
from slurm_harp.slurm_formats import parse_max_time, scontrol_records

__all__ = [
    "Partition",
    "PartitionTable",
    "from_scontrol",
    "from_slurm_conf",
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


def from_slurm_conf(text: str) -> PartitionTable:
    """The partitions and the billing mode of a slurm.conf text. ValueError names the line."""
    partitions: dict[str, Partition] = {}
    defaults: dict[str, str] = {}
    mode = Mode.SUM
    for number, line in _logical_lines(text):
        try:
            pairs = _pairs(line)
        except ValueError as exc:
            raise ValueError(f"slurm.conf line {number}: {exc}") from None
        if not pairs:
            continue
        first_key, first_value = pairs[0]
        if first_key == "priorityflags":
            mode = parse_priority_flags(first_value)
        elif first_key == "partitionname":
            own = dict(pairs[1:])
            if first_value.upper() == "DEFAULT":
                defaults |= own
                continue
            try:
                partitions[first_value] = _partition(first_value, defaults | own)
            except ValueError as exc:
                raise ValueError(f"slurm.conf line {number}: partition {first_value}: {exc}") from None
    return PartitionTable(partitions=partitions, mode=mode)


def from_scontrol(partitions_text: str, config_text: str = "") -> PartitionTable:
    """The partitions of ``scontrol show partition`` and the mode in ``scontrol show config``'s
    PriorityFlags line (none given: SUM). ValueError names the partition."""
    partitions: dict[str, Partition] = {}
    for block in scontrol_records(partitions_text, "PartitionName"):
        name = block["PartitionName"]
        try:
            partitions[name] = _partition(name, {key.lower(): value for key, value in block.items()})
        except ValueError as exc:
            raise ValueError(f"scontrol partition {name}: {exc}") from None
    found = _CONFIG_FLAGS.search(config_text)
    return PartitionTable(partitions, parse_priority_flags(found.group(1)) if found else Mode.SUM)


def _partition(name: str, values: Mapping[str, str]) -> Partition:
    weights_text = values.get("tresbillingweights", "").strip().strip('"')
    return Partition(
        name=name,
        weights=parse_weights(weights_text) if weights_text else None,
        max_minutes=parse_max_time(values.get("maxtime", "")),
    )


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with comments dropped and ``\\`` continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _pairs(line: str) -> list[tuple[str, str]]:
    """``Key=Value`` words of a line (keys lower-cased, quotes removed); a word without ``=`` is
    skipped (slurm.conf has none in the lines read here)."""
    try:
        words = shlex.split(line, comments=False, posix=True)
    except ValueError as exc:  # an unbalanced quote
        raise ValueError(f"{exc} in {line.strip()!r}") from None
    out = []
    for word in words:
        key, sep, value = word.partition("=")
        if sep:
            out.append((key.lower(), value))
    return out
