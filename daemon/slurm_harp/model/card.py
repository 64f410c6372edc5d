"""The model card: the JSON file beside a version's ONNX files that says what they are.

Format 1 keys: format, target, version, created, features (FEATURE_NAMES in order), transform,
unit, quantiles ([{quantile, file, sha256}]), files ({name: {sha256, bytes}}), training,
validation ({"0.90": metrics}), parity_max_abs_error, libraries, params.
Format 2 adds: models ([{name, kind, quantile or null, file, sha256}]: every published model,
the quantile ones also listed in quantiles with their name), selection ({window, policy, chosen,
table}: the model choice on validation), calibration (core.safety_rule.Calibration.to_dict() plus
how it was chosen: the rule the daemon applies), censoring, evaluation.
The store fills version, created and the sha256 sums; the trainer fills the rest.
The runtime reads formats 1 and 2 (READABLE_FORMATS) and refuses any other by name.
card.schema.json (beside this module; models/card.schema.json links to it) is the contract's
JSON Schema: the daemon validates every card against it before it loads a version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import numpy as np

from slurm_harp.core.request import Target
from slurm_harp.model.store_files import sha256_hex

CARD_FORMAT = 2
READABLE_FORMATS = (1, 2)
CARD_FILE = "card.json"
# Beside the card: the promotion verdict of the version (learning.promotion), when it was judged;
# written and read by model.verdict (through model.store.ModelStore: write_verdict, verdict).
PROMOTION_FILE = "promotion.json"
INPUT_NAME = "features"

# How a model's raw output maps to the target's unit: (undo log1p?, then multiply by).
TRANSFORMS: dict[str, tuple[bool, float]] = {
    "log1p_seconds": (True, 1.0 / 60.0),  # log1p(seconds) -> minutes
    "log1p": (True, 1.0),
    "identity": (False, 1.0),
}
# The unit each target is served in, which a card must name: the daemon never converts, so a card
# for memory in GB would serve its figures as MB. log1p_seconds gives minutes: a time transform only.
UNIT: dict[Target, str] = {Target.TIME: "minutes", Target.MEMORY: "MB per node", Target.CPUS: "CPUs"}
TIME_ONLY_TRANSFORMS = frozenset({"log1p_seconds"})


def to_unit(
    transform: str, values: np.ndarray, negative: Callable[[float], None] | None = None
) -> np.ndarray:
    """Raw model outputs -> the target's unit, clamped at 0. Works in place on ``values``.
    ``negative`` is told the lowest raw value when one is below 0 (the clamp would hide it)."""
    # Found on the raw values and the clamp only then: as many numpy calls as before, when none is.
    lowest = np.fmin.reduce(values, axis=None, initial=0.0)  # NaN passed over: nothing to clamp
    undo_log, scale = TRANSFORMS[transform]
    if undo_log:
        np.expm1(values, out=values)
    if scale != 1.0:
        values *= scale
    if lowest < 0.0:
        np.maximum(values, 0.0, out=values)
        if negative is not None:
            negative(float(lowest))
    return values


def unit_value(transform: str, value: float, negative: Callable[[float], None] | None = None) -> float:
    """to_unit for one value, without the arrays: the same numpy expm1 (whose bits may differ from
    math.expm1's), scale and clamp. The serving path's one-row predictions."""
    if value < 0.0:  # below 0 in the target's unit too; NaN is not
        if negative is not None:
            negative(value)
        return 0.0
    undo_log, scale = TRANSFORMS[transform]
    if undo_log:
        value = float(np.expm1(value))
    if scale != 1.0:
        value *= scale
    return value


def quantile_file_name(quantile: float) -> str:
    """q0.50.onnx, q0.90.onnx, q0.95.onnx; more digits only when the quantile needs them."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile {quantile} outside (0, 1)")
    cents = quantile * 100
    text = f"{quantile:.2f}" if abs(cents - round(cents)) < 1e-9 else f"{quantile:.6g}"
    return f"q{text}.onnx"


def model_file_name(name: str) -> str:
    """The ONNX file of a named model: "q0.90" -> q0.90.onnx, "huber" -> huber.onnx."""
    if not name or not all(c.isalnum() or c in "._-" for c in name) or name.startswith("."):
        raise ValueError(f"bad model name {name!r}")
    return f"{name}.onnx"


def quantile_key(quantile: float) -> str:
    """The key of a quantile in card dicts ("0.90")."""
    return quantile_file_name(quantile)[1:-5]


def complete_card(
    card: Mapping[str, Any], target: str, version: str, files: Mapping[str, bytes]
) -> dict[str, Any]:
    """``card`` as the store publishes it: the trainer's keys and the store's (target, version,
    created, and each file's size and sha256)."""
    out = dict(card)
    out["target"] = target
    out["version"] = version
    out["created"] = datetime.now(UTC).isoformat(timespec="seconds")
    sums = {name: sha256_hex(data) for name, data in files.items()}
    out["files"] = {name: {"sha256": sums[name], "bytes": len(data)} for name, data in files.items()}
    out["quantiles"] = _with_sums(card.get("quantiles", []), sums)
    if "models" in card:
        out["models"] = _with_sums(card["models"], sums)
    return out


def _with_sums(entries: Iterable[Mapping[str, Any]], sums: Mapping[str, str]) -> list[dict[str, Any]]:
    """Card entries naming a file, each with that file's sha256 added."""
    out = []
    for entry in entries:
        if entry.get("file") not in sums:
            raise ValueError(f"card names file {entry.get('file')!r} that is not being published")
        out.append({**entry, "sha256": sums[entry["file"]]})
    return out


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("slurm_harp.model").joinpath("card.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema)
    return validator


def check_schema(card: Any) -> None:
    """ValueError naming the first place where ``card`` breaks card.schema.json (a JSON path)."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(card))
    if error is not None:
        raise ValueError(f"card schema: at {error.json_path}: {error.message[:300]}")
