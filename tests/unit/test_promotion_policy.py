"""Promotion judges both versions by the limits the daemon sets under the site's policy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.core.decision import Action
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.learning.limit_outcomes import assess
from slurm_harp.learning.promotion import challenge
from slurm_harp.learning.trainer import Window
from slurm_harp.model.runtime import QuantileModel, load_version
from tests.unit.test_promotion import QUICK, champion_and_challenger


class _Rows:
    """The vectorizer of a Predictor asked about the window's jobs in turn: each job's features are
    the window's (the daemon computes the same from the request and its history)."""

    def __init__(self, x: np.ndarray) -> None:
        self.x, self.at = x, 0

    def __call__(self, requests: Sequence[JobRequest], history: np.ndarray | None = None, /) -> np.ndarray:
        return self.x[self.at : self.at + 1]


def daemon_limits(model: QuantileModel, policy: Policy, window: Window, rows: np.ndarray) -> np.ndarray:
    """The limits the daemon's Predictor sets for the window's ``rows`` under ``policy`` in rewrite
    mode (NaN: the request kept): the figures a version serving there would show."""
    features = _Rows(window.x)
    predictor = Predictor(policy, features, {Target.TIME: model})
    out = np.full(rows.size, np.nan)
    for i, row in enumerate(rows):
        features.at = int(row)
        asked, cores = float(window.td.requested[row]), int(window.td.weight[row])
        request = JobRequest(time_limit_minutes=int(asked), min_cpus=cores)
        (time,) = [t for t in predictor.decide(request).targets if t.target is Target.TIME]
        if time.action is Action.REWRITE:
            out[i] = time.new_value
    return out


@pytest.mark.parametrize("limits", ["quantile", "calibrated"])
def test_both_versions_are_judged_by_the_limits_the_daemon_sets_under_the_sites_policy(
    tmp_path: Path, limits: str
) -> None:
    """Promotion judged each version by its calibrated rule alone, whatever the site's policy
    (audit: promo_quantile.py, judged 0.00 % newly killed and 47.7 % of the waste cut where the
    daemon, serving policy.limits = "quantile", killed 7.38 % and cut 90.8 %), and without the
    policy's floors and min_gain: a challenger whose served limits kill far more could be promoted.
    Now the champion's figures are those of the limits the daemon's Predictor sets under the
    policy, and the challenger's those of the same policy on its models fitted before the window."""
    # Cuts must save a fifth of the request and leave 30 minutes; the median model where served.
    policy = Policy(
        default_mode=Mode.REWRITE,
        require_history=False,
        limits=limits,
        quantile=0.5,
        min_gain=0.2,
        floors={Target.TIME: 30.0},
    )
    pair = champion_and_challenger(tmp_path, 1200)
    store, window, calibrated_on = pair.store, pair.window, pair.asked
    budget = QUICK.calibration.kill_budget
    verdict = challenge(store, Target.TIME, pair.version, window, budget, policy=policy)
    new = np.flatnonzero(window.submit_time > pair.seen_until)
    if limits == "quantile":
        # No rule to calibrate again: every job new to the champion, the challenger's q0.5 model
        # fitted before the window.
        assert calibrated_on == [] and "by the quantile model nearest q0.5" in verdict.reason
        judged = new
        mine = window.quantile_predictions[0.5][judged]
    else:
        (rows,) = calibrated_on
        judged = np.setdiff1d(np.arange(len(window.td)), rows)
        mine = pair.calibrate(rows)[judged]
    td = window.td.take(judged)
    serving = store.current_dir(Target.TIME)
    assert serving is not None and verdict.champion is not None
    rival = load_version(serving, Target.TIME)
    champion_limits = daemon_limits(rival, policy, window, judged)
    assert (verdict.champion.killed_pct, verdict.champion.waste_cut_pct) == assess(champion_limits, td)
    # The challenger's value through the policy as Policy.decide turns a prediction into a rewrite.
    set_by_policy = [
        policy.decide(Target.TIME, JobRequest(time_limit_minutes=int(asked)), Mode.REWRITE, value, None, "v")
        if math.isfinite(value)
        else None
        for value, asked in zip(mine, td.requested, strict=True)
    ]
    challenger_limits = np.array(
        [d.new_value if d is not None and d.action is Action.REWRITE else np.nan for d in set_by_policy],
        dtype=float,
    )
    assert (verdict.challenger.killed_pct, verdict.challenger.waste_cut_pct) == assess(challenger_limits, td)
    # Floors and min_gain hold in what was judged.
    kept = np.isnan(challenger_limits)
    assert not kept.all() and (challenger_limits[~kept] >= 30).all()
    assert (challenger_limits[~kept] <= 0.8 * td.requested[~kept]).all()
