"""A version's card.json, read and checked before any of its models is loaded.

Read as the store's notes are (store_files.read_note: no link, no FIFO, at most MAX_NOTE_BYTES, no
NaN or infinity), then checked against card.schema.json and for what a schema cannot say: the version
is its directory, the features are this daemon's, quantiles are finite and unique, model names
unique, the unit is the one the target is served in (and a time transform only a time card's),
and the calibrated rule reads only models the card lists. Any problem is a CardError naming
the card and the problem, which model.runtime rejects the version with.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import Calibration
from slurm_harp.model.card import READABLE_FORMATS, TIME_ONLY_TRANSFORMS, UNIT, check_schema
from slurm_harp.model.store_files import read_note
from slurm_harp.regular_file import NotJSON, TooLarge

# A card harp writes is 4 or 5 levels deep. Nesting the parser still reads (~990 levels) makes the
# schema check recurse in turn, and its message's repr() raise RecursionError, no CardError.
MAX_CARD_DEPTH = 32


class CardError(ValueError):
    """A card no version may be served with; the message names the file and the problem."""


def read_card(path: Path) -> dict[str, Any]:
    """The JSON object of the card at ``path``."""
    try:
        card = read_note(path)
    except TooLarge as exc:  # a card of padding: read whole, the daemon ran out of memory
        raise CardError(f"{exc}: no card harp writes") from None
    except NotJSON as exc:  # bad UTF-8 or JSON, NaN, a 5000-digit integer, nesting past the parser's
        raise CardError(f"{path}: not valid JSON: {exc.reason}") from None
    except OSError as exc:
        raise CardError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(card, dict):
        raise CardError(f"{path}: not a JSON object")
    if _deeper_than(card, MAX_CARD_DEPTH):
        raise CardError(f"{path}: nested more than {MAX_CARD_DEPTH} levels deep: no card harp writes")
    return card


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON ``value`` nests more than ``limit`` containers deep. A loop over a stack of the
    open containers' iterators: no recursion, and memory for the depth, not for every element (a
    list of millions of numbers took 35 times the card's size)."""
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, dict | list):
            if len(stack) > limit:  # ``item`` is inside len(stack) - 1 containers
                return True
            stack.append(iter(item.values() if isinstance(item, dict) else item))
    return False


_END = object()


def check_card(card: dict[str, Any], path: Path, dir_name: str) -> Target:
    """The target ``card`` is for, once it passes card.schema.json (shapes, types, names,
    checksums' form) and what a schema cannot say."""
    if card.get("format") not in READABLE_FORMATS:
        readable = ", ".join(str(f) for f in READABLE_FORMATS)
        raise CardError(
            f"{path}: card format {repr(card.get('format'))[:80]} is unknown; this daemon reads formats "
            f"{readable}"
        )
    try:
        check_schema(card)
    except ValueError as exc:
        raise CardError(f"{path}: {exc}") from None
    if card["version"] != dir_name:
        raise CardError(f"{path}: card version {card['version']!r} is not the directory {dir_name!r}")
    if card["features"] != list(FEATURE_NAMES):
        raise CardError(f"{path}: feature mismatch: {_difference(card['features'])}")
    quantiles = [float(entry["quantile"]) for entry in card["quantiles"]]
    # The schema's bounds do not hold NaN back (every comparison with it is false): served, a NaN
    # quantile was the closest to any asked, and no model answered for it.
    if not all(math.isfinite(q) for q in quantiles):
        raise CardError(f"{path}: quantile not a finite number in {quantiles}")
    if len(set(quantiles)) != len(quantiles):
        raise CardError(f"{path}: repeated quantile in {quantiles}")
    models = card.get("models", [])
    if card["format"] == 1 and models:
        raise CardError(f"{path}: 'models' is a format 2 key")
    names = [entry["name"] for entry in models]
    if len(set(names)) != len(names):
        raise CardError(f"{path}: repeated model name in {names}")
    target = Target(card["target"])
    if card["unit"] != UNIT[target]:
        raise CardError(
            f"{path}: unit {str(card['unit'])[:40]!r}: the daemon serves {target.value} in {UNIT[target]!r}"
        )
    if card["transform"] in TIME_ONLY_TRANSFORMS and target is not Target.TIME:
        raise CardError(f"{path}: transform {card['transform']!r} gives minutes: a time transform only")
    return target


def calibration_of(card: dict[str, Any], path: Path) -> Calibration | None:
    """The card's safety rule (``check_card``ed card), checked against the models it lists; None
    when there is none."""
    data = card.get("calibration")
    if data is None:
        return None
    if not isinstance(data, dict):
        raise CardError(f"{path}: 'calibration' is not an object")
    try:
        calibration = Calibration.from_dict(data)
    except ValueError as exc:
        raise CardError(f"{path}: {exc}") from None
    if calibration.target.value != card.get("target"):
        raise CardError(
            f"{path}: calibration is for {calibration.target.value}, card for {card.get('target')!r}"
        )
    listed = {str(entry["name"]) for entry in card.get("models", [])}
    missing = [name for name in calibration.models if name not in listed]
    if missing:
        raise CardError(f"{path}: calibration reads models not in the card: {missing}")
    return calibration


def _difference(names: Any) -> str:
    """Where a card's feature list departs from the daemon's (a short, loggable description)."""
    if not isinstance(names, list):
        return f"card has {type(names).__name__}, not a list of names"
    for i, (theirs, ours) in enumerate(zip(names, FEATURE_NAMES, strict=False)):
        if theirs != ours:
            return f"feature {i} is {theirs!r} in the model, {ours!r} in the daemon"
    return f"model has {len(names)} features, daemon computes {len(FEATURE_NAMES)}"
