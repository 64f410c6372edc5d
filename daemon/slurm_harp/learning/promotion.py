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
A challenger trained on jobs older than the champion's is refused (a restored job store, a
lowered max_jobs, an old trace): nothing in its window is new to the champion, so it could not
lose a comparison. When fewer than MIN_JOBS jobs of the window are new to the champion, both
versions are judged as published on the whole window (both have seen most of it). A challenger
judged alone (no champion; CURRENT unreadable; a champion that cannot be loaded or evaluated:
deleted, corrupt, other features) must have finite figures within the kill budget.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from slurm_harp.core.predictor import closest_quantile
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import ladder_limits
from slurm_harp.learning.calibration import assess
from slurm_harp.learning.targets import TargetData, available
from slurm_harp.learning.trainer import Window
from slurm_harp.model.runtime import QuantileModel, load_version
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

    if not all(math.isfinite(v) for v in (challenger.killed_pct, challenger.waste_cut_pct)):
        return verdict(False, "the challenger's figures are not finite")
    budget_pct = 100.0 * kill_budget
    if champion is None:
        within = challenger.killed_pct <= budget_pct
        return verdict(
            within,
            f"no champion to compare with; newly kills {challenger.killed_pct:.2f} % "
            + ("within" if within else ">")
            + f" budget {budget_pct:.2f} %",
        )
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
    mine = load_version(store.target_dir(target) / version, target)  # as the daemon loads it
    whole = Standing(version, *assess(window.limits, window.td))

    def alone(why: str) -> Verdict:
        verdict = judge(whole, None, kill_budget, tolerance)
        return replace(verdict, reason=verdict.reason.replace("no champion to compare with", why, 1))

    pointer = store.current(target)
    if pointer.unreadable is not None:  # a damaged CURRENT file: a bad name, a link, a FIFO
        return alone(f"CURRENT unreadable: {pointer.unreadable}")
    current = pointer.path
    if current is None or current.name == version:
        return judge(whole, None, kill_budget, tolerance)
    try:  # whatever the old model does wrong (load, card, predict), it cannot be compared
        champion = load_version(current, target)
        seen_until, mine_until = _last_submit(champion), _last_submit(mine)
        if math.isfinite(mine_until) and mine_until < seen_until:
            return Verdict(
                False,
                f"trained on older jobs than the champion {current.name} (last submitted "
                f"{_utc(mine_until)}, the champion's {_utc(seen_until)})",
                whole,
                None,
                kill_budget,
                tolerance,
            )
        rows = np.flatnonzero(window.submit_time > seen_until)
        td = window.td.take(rows)
        # Too few jobs new to the champion for a fair out-of-sample comparison: both versions as
        # published, on the whole window.
        few = not available(td, MIN_JOBS)
        rival = standing(champion, window.x, window.td) if few else standing(champion, window.x[rows], td)
    except MemoryError:
        raise  # transient: the champion may be fine; this target fails and the champion stays
    except Exception as exc:
        log.warning("%s: champion %s cannot be evaluated: %s", target.value, current.name, exc)
        return alone(f"champion {current.name} cannot be evaluated: {exc}")
    if few:
        verdict = judge(standing(mine, window.x, window.td), rival, kill_budget, tolerance)
        return replace(
            verdict,
            reason=f"only {rows.size} jobs of the window are new to the champion {current.name}, "
            f"both judged on the whole window as published: {verdict.reason}",
        )
    challenger = Standing(version, *assess(window.limits[rows], td))
    return judge(challenger, rival, kill_budget, tolerance)


def _last_submit(model: QuantileModel) -> float:
    """When the last job a version was trained on was submitted (-inf when its card does not say)."""
    value = model.card.get("training", {}).get("last_submit_epoch")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else -math.inf


def _utc(epoch: float) -> str:
    if not math.isfinite(epoch):
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))
