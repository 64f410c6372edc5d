"""Slurm's billing TRES: TRESBillingWeights parsed, and a job's billed units computed from them.

As slurmctld computes it (src/common/assoc_mgr.c ``assoc_mgr_tres_weighted``, Slurm 25.x; the
``tres.html`` page documents the same):

- a partition without weights bills the job's CPU count;
- otherwise each TRES counts ``amount x weight``; by default they are summed;
- ``PriorityFlags=MAX_TRES``: the node TRES (cpu, mem, node and every gres) give their maximum,
  the others (licenses, burst buffers, ...) are added to it;
- ``PriorityFlags=MAX_TRES_GRES``: as MAX_TRES, but the gres are added instead of taking part
  in the maximum.

A weight may carry a unit suffix K, M, G, T or P: the weight is then per that many base units,
where the base unit is the MiB for mem and bb and one item for the rest. Like Slurm, a suffix
at or below the base unit changes nothing (``Mem=1K`` is one per MiB, not per KiB). Amounts
are in the TRES's base unit: mem in MiB (the "MB" of the rest of harp).

slurmctld keeps the job's billing as a double (fairshare uses it so); accounting shows it
truncated to an integer. Prices here use the double.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "NODE_TYPES",
    "TRES_TYPES",
    "Mode",
    "Weights",
    "billed_units",
    "parse_priority_flags",
    "parse_weights",
]

# Slurm's TRES types (tres.html). "billing" may be named but is skipped: it is the result.
TRES_TYPES = frozenset(
    {"bb", "billing", "cpu", "energy", "fs", "gres", "ic", "license", "mem", "node", "pages", "vmem"}
)
# The TRES tied to a node, which MAX_TRES takes the maximum of.
NODE_TYPES = frozenset({"cpu", "mem", "node", "gres"})
_MEBI_TYPES = frozenset({"mem", "bb"})  # base unit MiB (index 2 in "KMGTP" counting from 1)
_SUFFIXES = "KMGTP"
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?"
_WEIGHT = re.compile(rf"^(?P<number>{_NUMBER})(?P<unit>[KMGTP](?:i?B)?)?$", re.I)


class Mode(StrEnum):
    """How the weighted TRES combine (slurm.conf PriorityFlags)."""

    SUM = "sum"
    MAX_TRES = "max_tres"
    MAX_TRES_GRES = "max_tres_gres"


@dataclass(frozen=True, slots=True)
class Weights:
    """One partition's TRESBillingWeights: lower-case TRES name ("cpu", "mem", "gres/gpu",
    "license/lica") -> weight per base unit (suffixes already applied)."""

    text: str
    per_unit: Mapping[str, float]


def parse_weights(text: str) -> Weights:
    """Parse a TRESBillingWeights value such as ``CPU=1.0,Mem=0.25G,GRES/gpu=2.0``.

    Quotes around the whole value are dropped. Empty items are skipped and a TRES named twice
    keeps its last weight, as Slurm does. ValueError names the bad item: an unknown TRES type, a
    gres/license/bb/fs/ic without a name, a weight that is not a finite number >= 0, an unknown
    unit suffix, or no item at all (Slurm reads an empty value as "no weights": the caller's
    business, see partition_text).
    """
    body = text.strip().strip('"').strip()
    out: dict[str, float] = {}
    for item in body.split(","):
        item = item.strip()
        if item:
            name, weight = _item(item, text)
            out[name] = weight
    if not out:
        raise ValueError(f"TRESBillingWeights {text!r}: no TRES=weight item")
    return Weights(text=body, per_unit=out)


def _item(item: str, text: str) -> tuple[str, float]:
    where = f"TRESBillingWeights {text!r}: item {item!r}"
    name, sep, value = item.partition("=")
    name = name.strip().lower()
    kind, slash, sub = name.partition("/")
    if not sep or not name:
        raise ValueError(f"{where}: expected TRES=weight")
    if kind not in TRES_TYPES:
        raise ValueError(f"{where}: unknown TRES type {kind!r} (Slurm's: {', '.join(sorted(TRES_TYPES))})")
    if kind in {"gres", "license", "bb", "fs", "ic"} and not (slash and sub):
        raise ValueError(f"{where}: a {kind} TRES needs a name, e.g. {kind}/NAME")
    match = _WEIGHT.match(value.strip())
    if match is None:
        raise ValueError(f"{where}: the weight must be a number >= 0 with an optional unit K, M, G, T or P")
    weight, unit = float(match["number"]), match["unit"]
    if not math.isfinite(weight):
        raise ValueError(f"{where}: the weight must be finite")
    if unit:
        # Slurm's get_convert_unit_val: 1024 per step of the suffix above the type's base unit.
        steps = _SUFFIXES.index(unit[0].upper()) + 1 - (2 if kind in _MEBI_TYPES else 0)
        if steps > 0:
            weight /= 1024.0**steps
    return name, weight


def parse_priority_flags(text: str) -> Mode:
    """The billing mode a PriorityFlags value sets (``MAX_TRES,NO_FAIR_TREE`` -> MAX_TRES).

    Flags are comma-separated and case-insensitive; MAX_TRES_GRES wins over MAX_TRES (as in
    slurmctld's reader); flags about priority alone are ignored.
    """
    flags = {f.strip().upper() for f in text.strip().strip('"').split(",")}
    if "MAX_TRES_GRES" in flags:
        return Mode.MAX_TRES_GRES
    return Mode.MAX_TRES if "MAX_TRES" in flags else Mode.SUM


def billed_units(tres: Mapping[str, float], weights: Weights | None, mode: Mode = Mode.SUM) -> float:
    """A job's billing for its allocated ``tres`` (lower-case names as in Weights, amounts in base
    units: mem in MiB). No weights: the CPU count."""
    amounts = {name.lower(): float(v) for name, v in tres.items()}
    if weights is None:
        return amounts.get("cpu", 0.0)
    node = gres = rest = 0.0
    for name, weight in weights.per_unit.items():
        kind = name.partition("/")[0]
        value = amounts.get(name, 0.0) * weight
        if kind == "billing":
            continue
        if mode is Mode.SUM or kind not in NODE_TYPES:
            rest += value
        elif mode is Mode.MAX_TRES_GRES and kind == "gres":
            gres += value
        else:
            node = max(node, value)
    return node + gres + rest
