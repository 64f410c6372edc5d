"""Champion/challenger: a new version replaces the serving one only if it is not worse on the
latest validation window.

The window is the challenger's validation window (the most recent jobs), cut to the jobs
submitted after the last job the champion was trained on: both versions are judged out of
sample. The challenger by the limits its rule set there with the models fitted before the
window (its published models were refitted on every job, the window included); the champion
loaded from the store as the daemon loads it (ONNX, card, probe), by the limits it would set:
its card's calibrated rule (core.safety_rule), or for a card without one the quantile nearest
``quantile``. Limits are graded by learning.calibration.assess: newly killed % and
reservation-waste cut %. The challenger is also loaded; one that does not load is never promoted.

The challenger is not worse when
1. its newly killed rate is within the kill budget, or no higher than the champion's; and
2. its waste cut is at least the champion's minus ``tolerance`` points, unless the champion
   breaks the kill budget on this window (it is no longer safe; rule 1 suffices).
A champion that cannot be loaded or evaluated (deleted, corrupt, other features) is replaced;
when fewer than MIN_JOBS jobs of the window are new to it, there is no fair comparison and the
challenger is promoted if it meets rule 1 on its whole window.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from slurm_harp.core.predictor import closest_quantile
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import ladder_limits
from slurm_harp.learning.calibration import assess
from slurm_harp.learning.targets import TargetData, available
from slurm_harp.learning.trainer import Window
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore

MIN_JOBS = 20


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

    @property
    def summary(self) -> str:
        return ("promoted: " if self.promote else "kept the champion: ") + self.reason

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"verdict": self.summary}


def model_limits(model: QuantileModel, x: np.ndarray, td: TargetData, quantile: float = 0.9) -> np.ndarray:
    """The limits ``model`` sets for the rows ``x`` (NaN = keeps the request), as the daemon would."""
    calibration = model.calibration
    if calibration is not None:
        predictions = model.predict_named(x, calibration.models)
        return ladder_limits(predictions, td.requested, td.weight, calibration, td.group)
    predicted = model.predict_quantile(x, closest_quantile(model.quantiles, quantile))
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
    window: Window,
    kill_budget: float,
    tolerance: float = 0.5,
) -> Verdict:
    """Judge the published, not yet serving ``version`` against the serving one on ``window``.
    Raises runtime.ModelError when the challenger itself does not load."""
    QuantileModel.load(store.target_dir(target) / version, target)  # it must load as the daemon loads it

    def verdict(promote: bool, reason: str, challenger: Standing) -> Verdict:
        return Verdict(promote, reason, challenger, None, kill_budget, tolerance)

    whole = Standing(version, *assess(window.limits, window.td))
    try:
        current = store.current_dir(target)
    except ValueError as exc:  # a damaged CURRENT file
        return verdict(True, f"CURRENT unreadable: {exc}", whole)
    if current is None or current.name == version:
        return judge(whole, None, kill_budget, tolerance)
    try:  # whatever the old model does wrong (load, card, predict), it cannot be compared
        champion = QuantileModel.load(current, target)
        seen_until = float(champion.card.get("training", {}).get("last_submit_epoch") or -math.inf)
        rows = np.flatnonzero(window.submit_time > seen_until)
        td = window.td.take(rows)
        if not available(td, MIN_JOBS):
            budget_ok = whole.killed_pct <= 100.0 * kill_budget
            return verdict(
                budget_ok,
                f"only {rows.size} jobs of the window are new to the champion {current.name}: "
                + ("within" if budget_ok else "over")
                + " the kill budget on its window",
                whole,
            )
        rival = standing(champion, window.x[rows], td)
    except Exception as exc:
        log.warning("%s: champion %s cannot be evaluated: %s", target.value, current.name, exc)
        return verdict(True, f"champion {current.name} cannot be evaluated: {exc}", whole)
    challenger = Standing(version, *assess(window.limits[rows], td))
    return judge(challenger, rival, kill_budget, tolerance)
