"""Champion/challenger: a new version replaces the serving one only if it is not worse on the
latest validation window.

The window is the challenger's validation window: the most recent jobs, which its models did
not train on. Both versions are loaded from the store as the daemon loads them (ONNX, card,
probe) and judged by the limits they would set there: the card's calibrated rule
(model.decision), or for a card without one the quantile nearest ``quantile``. Limits are
graded by learning.calibration.assess: newly killed % and reservation-waste cut %.

The challenger is not worse when
1. its newly killed rate is within the kill budget, or no higher than the champion's; and
2. its waste cut is at least the champion's minus ``tolerance`` points, unless the champion
   breaks the kill budget on this window (it is no longer safe; rule 1 suffices).
A champion that cannot be loaded or evaluated (deleted, corrupt, other features) is replaced.
The champion may have trained on part of this window, which only favours keeping it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from slurm_harp.core.request import Target
from slurm_harp.learning.calibration import assess
from slurm_harp.learning.targets import TargetData
from slurm_harp.model.decision import ladder_limits
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore

NOTE = "promotion.json"


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Standing:
    """How one version does on the window."""

    version: str
    killed_pct: float
    waste_cut_pct: float


@dataclass(frozen=True)
class Verdict:
    promote: bool
    reason: str
    challenger: Standing
    champion: Standing | None
    kill_budget: float
    tolerance: float

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["verdict"] = ("promoted: " if self.promote else "kept the champion: ") + self.reason
        return out


def model_limits(model: QuantileModel, x: np.ndarray, td: TargetData, quantile: float = 0.9) -> np.ndarray:
    """The limits ``model`` sets for the rows ``x`` (NaN = keeps the request), as the daemon would."""
    calibration = model.calibration
    if calibration is not None:
        predictions = model.predict_named(x, calibration.models)
        return ladder_limits(predictions, td.requested, td.weight, calibration)
    nearest = min(model.quantiles, key=lambda q: (abs(q - quantile), -q))
    predicted = model.predict_quantile(x, nearest)
    limits: np.ndarray = np.minimum(td.requested, np.maximum(1.0, np.ceil(predicted)))
    with np.errstate(invalid="ignore"):
        limits[~(limits < td.requested)] = np.nan
    return limits


def standing(model: QuantileModel, x: np.ndarray, td: TargetData, quantile: float = 0.9) -> Standing:
    killed, cut = assess(model_limits(model, x, td, quantile), td)
    return Standing(model.version, killed, cut)


def judge(
    challenger: Standing, champion: Standing | None, kill_budget: float, tolerance: float = 0.5
) -> Verdict:
    """Apply the rules of the module documentation. ``kill_budget`` is a fraction, the figures %."""

    def verdict(promote: bool, reason: str) -> Verdict:
        return Verdict(promote, reason, challenger, champion, kill_budget, tolerance)

    if champion is None:
        return verdict(True, "no champion to compare with")
    if not all(math.isfinite(v) for v in (challenger.killed_pct, challenger.waste_cut_pct)):
        return verdict(False, "the challenger's figures are not finite")
    budget_pct = 100.0 * kill_budget
    if challenger.killed_pct > max(budget_pct, champion.killed_pct):
        return verdict(
            False,
            f"newly kills {challenger.killed_pct:.2f} % > budget {budget_pct:.2f} % "
            f"and champion {champion.killed_pct:.2f} %",
        )
    if champion.killed_pct > budget_pct:
        return verdict(
            True, f"the champion breaks the kill budget on the latest window ({champion.killed_pct:.2f} %)"
        )
    if challenger.waste_cut_pct < champion.waste_cut_pct - tolerance:
        return verdict(
            False,
            f"cuts {challenger.waste_cut_pct:.1f} % of the waste, champion "
            f"{champion.waste_cut_pct:.1f} % (tolerance {tolerance:g} points)",
        )
    return verdict(
        True,
        f"cuts {challenger.waste_cut_pct:.1f} % (champion {champion.waste_cut_pct:.1f} %) at "
        f"{challenger.killed_pct:.2f} % newly killed (champion {champion.killed_pct:.2f} %)",
    )


def challenge(
    store: ModelStore,
    target: Target,
    version: str,
    window: tuple[np.ndarray, TargetData],
    kill_budget: float,
    tolerance: float = 0.5,
) -> Verdict:
    """Judge the published, not yet serving ``version`` against the serving one on ``window``.
    Raises runtime.ModelError when the challenger itself does not load."""
    x, td = window
    challenger = standing(QuantileModel.load(store.target_dir(target) / version), x, td)
    try:
        current = store.current_dir(target)
    except ValueError as exc:  # a damaged CURRENT file
        return Verdict(True, f"CURRENT unreadable: {exc}", challenger, None, kill_budget, tolerance)
    if current is None or current.name == version:
        return judge(challenger, None, kill_budget, tolerance)
    try:
        champion = standing(QuantileModel.load(current), x, td)
    except Exception as exc:  # whatever the old model does wrong, it cannot be compared
        log.warning("%s: champion %s cannot be evaluated: %s", target.value, current.name, exc)
        return Verdict(
            True,
            f"champion {current.name} cannot be evaluated: {exc}",
            challenger,
            None,
            kill_budget,
            tolerance,
        )
    return judge(challenger, champion, kill_budget, tolerance)
