"""The strategies `harp evaluate` knows by name: the baselines, and ours (needs the `train` extra)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_harp.core.request import Target
from slurm_harp.evaluation.baselines import RequestStrategy, ScaledTsafrirStrategy, TsafrirStrategy
from slurm_harp.evaluation.harpstyle import HarpStyleStrategy
from slurm_harp.evaluation.strategy import Strategy

BASELINES: tuple[str, ...] = ("request", "tsafrir", "tsafrir-scaled", "harp-linear", "harp-tree", "harp-mlp")
OURS = "ours"
NAMES: tuple[str, ...] = (*BASELINES, OURS)


class Unavailable(Exception):
    """A strategy that cannot run here (not installed, or not for this target)."""


def build(
    name: str, target: Target, seed: int = 0, ours_options: Mapping[str, Any] | None = None
) -> Strategy:
    """A fresh, unfitted strategy. Raises ValueError for an unknown name, Unavailable for ours
    when it cannot be imported (e.g. no `train` extra) or it refuses the target.
    ``ours_options``: keyword arguments of HarpStrategy (e.g. ``trees``)."""
    if name == "request":
        return RequestStrategy(target)
    if name == "tsafrir":
        return TsafrirStrategy(target)
    if name == "tsafrir-scaled":
        return ScaledTsafrirStrategy(target)
    if name == "harp-linear":
        return HarpStyleStrategy(target, "linear", seed)
    if name == "harp-tree":
        return HarpStyleStrategy(target, "tree", seed)
    if name == "harp-mlp":
        return HarpStyleStrategy(target, "mlp", seed)
    if name == OURS:
        return ours(target, ours_options or {})
    raise ValueError(f"unknown strategy {name!r}; known: {', '.join(NAMES)}")


def ours(target: Target, options: Mapping[str, Any]) -> Strategy:
    """evaluation.ours.HarpStrategy(target, **options), imported here so that LightGBM and ONNX
    (the `train` extra) are loaded only when ours is asked for."""
    try:
        from slurm_harp.evaluation.ours import HarpStrategy
    except ImportError as exc:
        raise Unavailable(f"our strategy needs the train extra ({exc})") from exc
    try:
        return HarpStrategy(target, **options)
    except (ValueError, NotImplementedError) as exc:
        raise Unavailable(f"HarpStrategy does not support target {target.value}: {exc}") from exc


def parse_names(text: str) -> list[str]:
    """A comma-separated list of strategy names ("all" or "baselines" expand); unknown names raise."""
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        expanded = NAMES if part == "all" else BASELINES if part == "baselines" else (part,)
        for name in expanded:
            if name not in NAMES:
                raise ValueError(f"unknown strategy {name!r}; known: {', '.join(NAMES)}")
            if name not in names:
                names.append(name)
    if not names:
        raise ValueError("no strategy given")
    return names
