"""Where promotion judges a challenger against the serving version (learning.promotion), out of
sample for both: the window's jobs submitted after the champion's last one, and the challenger's
limits there as the daemon would set them under the site's policy: its rule's value, chosen and
calibrated again on earlier jobs of the window only, or where the policy serves quantile models
its quantile model's, fitted before the window; either through the policy (Policy.new_values). Its
published rule, calibrated on the whole window, meets the kill budget there by construction.
Calibrated again on fewer usable jobs than calibration.jobs_needed, the rule never rewrites: it
would stand in for a published rule that does, so such a split is not used; when none is left,
the rule as published is judged, and the verdict says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from slurm_harp.core.policy import Policy
from slurm_harp.core.predictor import closest_quantile, served_rule
from slurm_harp.learning.calibration import jobs_needed
from slurm_harp.learning.limit_outcomes import finished, usable
from slurm_harp.learning.targets import TargetData, available
from slurm_harp.learning.trainer import Window
from slurm_harp.model.runtime import QuantileModel

# Fewer jobs new to the champion than this are no fair comparison out of sample.
MIN_JOBS = 20
# A challenger's rule calibrated again on the window's earlier jobs for promotion needs at least
# this many that finished under their request.
MIN_CALIBRATION_JOBS = 100


@dataclass(frozen=True)
class Judged:
    rows: np.ndarray  # the window's rows both versions are judged on
    limits: np.ndarray  # the challenger's limits on them
    how: str  # what the rows are and how the challenger's rule was calibrated, for the verdict


def out_of_sample(window: Window, seen_until: float, new: np.ndarray, kill_budget: float) -> Judged:
    """Where to judge both versions among ``new``, the window's rows submitted after the champion's
    last job (at least MIN_JOBS usable), and the challenger's limits there, set by a rule chosen and
    calibrated (as training does, models fitted before the window) on earlier rows only:
    1. the rows submitted up to the champion's last job: the judged rows are ``new``;
    2. when those hold fewer than MIN_CALIBRATION_JOBS jobs that finished under their request, or
       fewer usable jobs than ``jobs_needed(kill_budget)`` (a champion older than the window),
       those and the first half of ``new``: the judged rows are the second half;
    3. when neither leaves enough on both sides, the rule as published, calibrated on the judged
       rows too, judged on ``new``."""
    earlier = np.flatnonzero(window.submit_time <= seen_until)
    half = new.size // 2
    splits = (
        (earlier, new, "submitted up to the champion's last job"),
        (np.concatenate([earlier, new[:half]]), new[half:], "the first half of those after the champion's"),
    )
    why = f"{MIN_CALIBRATION_JOBS} that finished before those judged, and {MIN_JOBS} to judge"
    again = window.recalibrated
    for calibrate_on, judged, which in splits:
        if again is None:  # no rule to calibrate again (a window from elsewhere)
            break
        short = _too_few_to_calibrate(window.td.take(calibrate_on), kill_budget)
        if short is not None:
            why = short
            continue
        if not available(window.td.take(judged), MIN_JOBS):
            why = f"fewer than {MIN_JOBS} usable to judge after the {calibrate_on.size} to calibrate on"
            break
        return Judged(
            judged,
            again(calibrate_on)[judged],
            f"the {judged.size} latest jobs, the challenger's rule calibrated on the "
            f"{calibrate_on.size} before them ({which})",
        )
    return Judged(
        new,
        window.limits[new],
        f"the {new.size} jobs new to the champion, the challenger's rule as published: calibrated "
        f"on them too (too few jobs to calibrate it apart: {why})",
    )


def quantile_served(mine: QuantileModel, window: Window, policy: Policy) -> np.ndarray | None:
    """The limits the challenger sets on every row of the window when ``policy`` serves its
    quantile model (core.predictor.served_rule), from that model fitted before the window (out of
    sample, as the rule's); None when its rule sets them."""
    if served_rule(mine, policy) is not None:
        return None
    quantile = closest_quantile(mine.quantiles, policy.quantile)
    predicted = window.quantile_predictions.get(quantile)
    if predicted is None:  # a window from elsewhere: the model as published (in sample)
        predicted = mine.predict_quantile(window.x, quantile)
    return policy.new_values(window.td.target, predicted, window.td.requested)


def as_served(
    window: Window, policy: Policy, rule_limits: np.ndarray, rows: np.ndarray, by_quantile: np.ndarray | None
) -> np.ndarray:
    """The challenger's limits on ``rows`` as the daemon would set them: ``rule_limits`` (its rule's,
    on those rows) through the policy, or its quantile model's (``by_quantile``)."""
    if by_quantile is not None:
        picked: np.ndarray = by_quantile[rows]
        return picked
    return policy.new_values(window.td.target, rule_limits, window.td.requested[rows])


def where_judged(
    window: Window,
    seen_until: float,
    new: np.ndarray,
    kill_budget: float,
    policy: Policy,
    by_quantile: np.ndarray | None,
) -> Judged:
    """Where both versions are judged out of sample, and the challenger's limits there. Its quantile
    model served, there is no rule to calibrate again: every job new to the champion."""
    if by_quantile is not None:
        return Judged(
            new,
            by_quantile[new],
            f"the {new.size} jobs new to the champion, by the quantile model nearest "
            f"q{policy.quantile:g} that the policy serves (no rule to calibrate again), the "
            "challenger's fitted before the window",
        )
    judged = out_of_sample(window, seen_until, new, kill_budget)
    return replace(judged, limits=as_served(window, policy, judged.limits, judged.rows, None))


def _too_few_to_calibrate(part: TargetData, kill_budget: float) -> str | None:
    """Why ``part`` is too few to calibrate the challenger's rule on again, None when it is not.
    Below ``jobs_needed`` usable jobs the rule calibrated again never rewrites (learning.calibration):
    judged so, it would stand in for a published rule that does, calibrated on more."""
    done = int(finished(part).sum())
    if done < MIN_CALIBRATION_JOBS:
        return f"{done} that finished under their request before those judged, {MIN_CALIBRATION_JOBS} needed"
    needed, use = jobs_needed(kill_budget), int(usable(part).sum())
    if not math.isfinite(needed):
        return "no number of jobs shows a kill budget of 0 met"
    if use < needed:
        return (
            f"{use} usable before those judged, {needed:.0f} needed to show at most "
            f"{100 * kill_budget:g} % newly killed"
        )
    return None
