"""Champion/challenger: a new version replaces the serving one only if it is not worse on the
latest validation window.

The window is the challenger's validation window (the most recent jobs), cut to the jobs
submitted after the last job the champion was trained on: both versions are judged out of
sample. Both are judged by the limits the daemon would set under the site's policy (``policy``,
harp nightly's [policy]): the value of what it serves, its card's calibrated rule or the quantile
model nearest policy.quantile (core.predictor.served_rule), through the policy's floors and
min_gain (core.policy.Policy.new_values). The champion loaded from the store as the daemon loads
it (ONNX, card, probe). Its rule was calibrated on jobs before the ones judged; so is the
challenger's: by the limits of its models fitted before the window (its published models were
refitted on every job, the window included), under a rule chosen and calibrated as training does
but on the window's jobs submitted up to the champion's last one only (when those are too few,
on more of the window, or the rule as published: learning.promotion_rows). The published rule,
calibrated on the whole window, would meet the kill budget there by construction. Where the policy
serves quantile models there is no rule to calibrate again: the challenger's quantile model fitted
before the window is judged on every job new to the champion. Limits are graded by
learning.limit_outcomes.assess: newly killed % and reservation-waste cut %. The challenger is also
loaded; one that does not load is never promoted.

The challenger is not worse when
1. its newly killed rate is within the kill budget, or no higher than the champion's; and
2. its waste cut is at least the champion's minus ``tolerance`` points, unless the champion
   breaks the kill budget on this window and the challenger kills fewer (the champion is no longer
   safe: rule 1 suffices; one killing as many must cut as much) or the window has no waste to cut
   (its requests left none: no cut is measured, the verdict says so).
A challenger trained on jobs older than the champion's is refused (a restored job store, a
lowered max_jobs, an old trace): nothing in its window is new to the champion, so it could not
lose a comparison. A champion whose last job is stamped after ``now``
(trained while the controller's clock ran ahead: training now leaves those jobs out, so every
challenger would look older until the clock reached them) is judged as one whose card does not say
when its training ended, logged. When fewer than MIN_JOBS jobs of the window are new to the
champion, both versions are judged as published on the whole window (both have seen most of it). A
challenger judged alone (no champion; CURRENT unreadable; a champion that cannot be loaded or
evaluated: deleted, corrupt, other features) must have finite figures within the kill budget, judged
as published on the whole window (in sample: this mostly checks that its figures are finite).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from slurm_harp.core.policy import Policy
from slurm_harp.core.predictor import closest_quantile, served_rule
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import ladder_limits
from slurm_harp.learning.limit_outcomes import assess
from slurm_harp.learning.promotion_rows import MIN_JOBS, as_served, quantile_served, where_judged
from slurm_harp.learning.targets import TargetData, available
from slurm_harp.learning.trainer import Window
from slurm_harp.model.runtime import QuantileModel, load_version
from slurm_harp.model.store import ModelStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Standing:
    """How one version does on the window."""

    version: str
    killed_pct: float
    waste_cut_pct: float  # NaN: the window has no waste to cut (core.accuracy.cut_pct)


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
        """As promotion.json holds it: JSON has no NaN, a cut of nothing to cut is null there."""
        out = asdict(self) | {"verdict": self.summary}
        for side in (out["challenger"], out["champion"]):
            if side is not None and math.isnan(side["waste_cut_pct"]):
                side["waste_cut_pct"] = None
        return out


def model_limits(model: QuantileModel, x: np.ndarray, td: TargetData, policy: Policy) -> np.ndarray:
    """The limits ``model`` sets for the rows ``x`` under ``policy`` (NaN = keeps the request), as
    the daemon sets them (core.predictor): the value of the rule or quantile model it serves
    (served_rule), through the policy's floor and min_gain (Policy.new_values)."""
    rule = served_rule(model, policy)
    if rule is not None:
        predictions = model.predict_named(x, rule.models)
        value = ladder_limits(predictions, td.requested, td.weight, rule, td.group)
    else:
        value = model.predict_quantile(x, closest_quantile(model.quantiles, policy.quantile))
    return policy.new_values(td.target, value, td.requested)


def standing(model: QuantileModel, x: np.ndarray, td: TargetData, policy: Policy) -> Standing:
    killed, cut = assess(model_limits(model, x, td, policy), td)
    return Standing(model.version, killed, cut)


def judge(
    challenger: Standing, champion: Standing | None, kill_budget: float, tolerance: float = 0.5
) -> Verdict:
    """Apply the rules of the module documentation. ``kill_budget`` is a fraction, the figures %."""

    def verdict(promote: bool, reason: str) -> Verdict:
        return Verdict(promote, reason, challenger, champion, kill_budget, tolerance)

    # A NaN cut is a window with no waste to cut (both versions' alike: the same jobs), no fault.
    if not math.isfinite(challenger.killed_pct) or math.isinf(challenger.waste_cut_pct):
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
    if champion.killed_pct > budget_pct and challenger.killed_pct < champion.killed_pct:
        return verdict(
            True, f"the champion breaks the kill budget on the latest window ({champion.killed_pct:.2f} %)"
        )
    if math.isnan(challenger.waste_cut_pct) and math.isnan(champion.waste_cut_pct):
        cuts = "no waste to cut on the window"
    elif math.isnan(challenger.waste_cut_pct) or math.isnan(champion.waste_cut_pct):
        # Not from challenge(), which grades both on the same jobs: kept out of a comparison NaN
        # would always pass.
        return verdict(False, "the two versions' waste cuts cannot be compared (one has no figure)")
    elif challenger.waste_cut_pct < champion.waste_cut_pct - tolerance:
        return verdict(
            False,
            f"cuts {challenger.waste_cut_pct:.1f} % of the waste, champion "
            f"{champion.waste_cut_pct:.1f} % (tolerance {tolerance:g} points)",
        )
    else:
        cuts = f"cuts {challenger.waste_cut_pct:.1f} % (champion {champion.waste_cut_pct:.1f} %)"
    return verdict(
        True,
        f"{cuts} at {challenger.killed_pct:.2f} % newly killed (champion {champion.killed_pct:.2f} %)",
    )


def challenge(
    store: ModelStore,
    target: Target,
    version: str,
    window: Window,
    kill_budget: float,
    tolerance: float = 0.5,
    now: float | None = None,
    policy: Policy | None = None,
) -> Verdict:
    """Judge the published, not yet serving ``version`` against the serving one on ``window``;
    ``now`` (unix seconds, this host's clock by default) is the clock training filtered the jobs by;
    ``policy``: the site's, which the daemon sets limits under (the default policy by default).
    Raises runtime.ModelError when the challenger itself does not load."""
    policy = Policy() if policy is None else policy
    mine = load_version(store.target_dir(target) / version, target)  # as the daemon loads it
    by_quantile = quantile_served(mine, window, policy)  # None: its rule sets its limits
    rows = np.arange(len(window.td))
    whole = Standing(version, *assess(as_served(window, policy, window.limits, rows, by_quantile), window.td))

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
    except MemoryError:
        raise  # transient: the champion may be fine; this target fails and the champion stays
    except Exception as exc:
        return _unevaluated(target, current.name, exc, alone)
    ahead = _ahead_of(now, seen_until, target, current.name)
    if ahead:
        seen_until = -math.inf
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
    new = np.flatnonzero(window.submit_time > seen_until)
    # Too few jobs new to the champion for a fair out-of-sample comparison: both versions as
    # published, on the whole window.
    few = not available(window.td.take(new), MIN_JOBS)
    judged = None if few else where_judged(window, seen_until, new, kill_budget, policy, by_quantile)
    try:
        if judged is None:
            rival = standing(champion, window.x, window.td, policy)
        else:
            rival = standing(champion, window.x[judged.rows], window.td.take(judged.rows), policy)
    except MemoryError:
        raise
    except Exception as exc:
        return _unevaluated(target, current.name, exc, alone)
    if judged is None:
        verdict = judge(standing(mine, window.x, window.td, policy), rival, kill_budget, tolerance)
        return replace(
            verdict,
            reason=f"only {new.size} jobs of the window are new to the champion {current.name}, "
            f"both judged on the whole window as published: {verdict.reason}{ahead}",
        )
    challenger = Standing(version, *assess(judged.limits, window.td.take(judged.rows)))
    verdict = judge(challenger, rival, kill_budget, tolerance)
    return replace(verdict, reason=f"{verdict.reason}; judged on {judged.how}{ahead}")


def _ahead_of(now: float | None, seen_until: float, target: Target, name: str) -> str:
    """A note for the verdict when the champion's last job is stamped after ``now`` (the clock that
    stamped it ran ahead), logged; "" when it is not."""
    # No slack: training leaves out a job whose start or end is ahead, even one submitted just before
    # now, and a champion trained a night ago has no job submitted after this run's clock.
    latest = time.time() if now is None else now
    if not seen_until > latest:
        return ""
    log.warning(
        "%s: champion %s was trained on jobs submitted up to %s, after this host's clock "
        "(the clock that stamped them ran ahead): its training end is taken as unknown",
        target.value,
        name,
        _utc(seen_until),
    )
    return f"; the champion's last job, {_utc(seen_until)}, is ahead of this host's clock: taken as unknown"


def _unevaluated(target: Target, name: str, exc: Exception, alone: Callable[[str], Verdict]) -> Verdict:
    log.warning("%s: champion %s cannot be evaluated: %s", target.value, name, exc)
    return alone(f"champion {name} cannot be evaluated: {exc}")


def _last_submit(model: QuantileModel) -> float:
    """When the last job a version was trained on was submitted (-inf when its card does not say)."""
    value = model.card.get("training", {}).get("last_submit_epoch")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else -math.inf


def _utc(epoch: float) -> str:
    if not math.isfinite(epoch):
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))
