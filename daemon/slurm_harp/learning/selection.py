"""Choosing one model on the validation window by a documented, configurable policy.

Default: WTM (HARP) — the lowest under-prediction percentage (UPP) first, then the lowest
over-prediction error (OV_MAPE). Two corrections to HARP's code:
- the tie-break compares OV_MAPE among the candidates tied on UPP only (HARP compared it over
  the whole table, so a model with a worse UPP could win);
- "tied" means within ``tolerance`` percentage points of the best UPP: with continuous metrics
  exact ties never happen and the rule would reduce to "highest quantile wins".
Any metric of core.accuracy.summary can be primary or secondary (lower is better, except the
ones in HIGHER_IS_BETTER). Selection only ever sees the validation window: callers pass it
nothing else, and the card records the window it used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from slurm_harp.core import accuracy

HIGHER_IS_BETTER = frozenset({"aea", "waste_cut_pct"})
METRICS = ("upp", "up_mape", "ov_mape", "aea", "newly_killed_pct", "waste_cut_pct", "censored_upp")
Table = dict[str, dict[str, float]]


@dataclass(frozen=True)
class SelectionPolicy:
    primary: str = "upp"
    secondary: str = "ov_mape"
    tolerance: float = 1.0  # percentage points (or the primary metric's unit)

    def as_dict(self) -> dict[str, Any]:
        return {"name": "wtm" if (self.primary, self.secondary) == ("upp", "ov_mape") else "custom"} | asdict(
            self
        )


def score_table(
    predictions: Mapping[str, np.ndarray],
    actual: np.ndarray,
    requested: np.ndarray,
    censored: np.ndarray,
    weight: np.ndarray | None = None,
) -> Table:
    """Validation metrics per model, predictions capped at the request (a rewrite never raises
    a limit). Scored on jobs that finished (not censored); ``censored_upp`` reports apart how
    often a censored job's observed lower bound is already above the prediction."""
    done = ~censored & np.isfinite(actual)
    table: Table = {}
    for name, predicted in predictions.items():
        capped = np.fmin(predicted, requested)  # fmin: an unknown request leaves the prediction
        has_request = done & np.isfinite(requested)
        stats = accuracy.summary(capped[done], actual[done])
        if has_request.any():
            w = None if weight is None else weight[has_request]
            stats["newly_killed_pct"] = accuracy.newly_killed_pct(
                capped[has_request], actual[has_request], requested[has_request]
            )
            stats["waste_cut_pct"] = accuracy.waste_cut_pct(
                capped[has_request], actual[has_request], requested[has_request], w
            )
        stats["censored_upp"] = accuracy.upp(capped[censored], actual[censored])
        table[name] = stats
    return table


def _key(value: float, metric: str) -> float:
    if not math.isfinite(value):
        return math.inf  # a metric over an empty set never wins
    return -value if metric in HIGHER_IS_BETTER else value


def select(table: Table, policy: SelectionPolicy) -> str:
    """The chosen model's name. Raises ValueError on an empty table or an unknown metric."""
    if not table:
        raise ValueError("no candidate to select from")
    for metric in (policy.primary, policy.secondary):
        if not all(metric in stats for stats in table.values()):
            raise ValueError(f"metric {metric!r} missing from the validation table")
    primary = {name: _key(stats[policy.primary], policy.primary) for name, stats in table.items()}
    best = min(primary.values())
    tied = [name for name, key in primary.items() if key <= best + policy.tolerance]
    # Stable: among equals, the first candidate in table order wins.
    return min(tied, key=lambda name: (_key(table[name][policy.secondary], policy.secondary), primary[name]))
