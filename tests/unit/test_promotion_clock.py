"""Promotion against a champion trained while the controller's clock ran ahead (learning.promotion)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_harp.accounting import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.learning.promotion import challenge
from slurm_harp.learning.trainer import train_target
from slurm_harp.model.store import ModelStore
from tests.unit.test_promotion import QUICK, regular_users

AHEAD_S = 30 * 86400
BUDGET = QUICK.calibration.kill_budget  # judged by the budget its rules are calibrated to


def _ahead(record: JobRecord) -> JobRecord:
    """``record`` as a controller whose clock ran AHEAD_S ahead stamped it."""
    assert record.request.submit_time and record.start_time and record.end_time
    return replace(
        record,
        request=replace(record.request, submit_time=record.request.submit_time + AHEAD_S),
        start_time=record.start_time + AHEAD_S,
        end_time=record.end_time + AHEAD_S,
    )


def test_a_champion_trained_on_jobs_stamped_ahead_does_not_freeze_promotion(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Trained while the clock ran 30 days ahead, the champion's last job is stamped in the future;
    with the clock right again, training leaves those jobs out, and every challenger was refused as
    "trained on older jobs than the champion" for as long as the clock had been ahead. Past the
    slack training allows, the champion's training end is now unknown (logged, said in the verdict)
    and both are judged on the window's later half; within it, the refusal holds."""
    jobs = regular_users(1200)
    store = ModelStore(tmp_path / "models")
    champion = train_target(jobs[:800] + [_ahead(r) for r in jobs[800:900]], Target.TIME, QUICK)
    name = store.publish(Target.TIME, champion.files, champion.card)
    stamped = champion.card["training"]["last_submit_epoch"]
    # What the store holds now, less the jobs stamped ahead, as commands.publication.trainable leaves.
    result = train_target(jobs[:800] + jobs[900:], Target.TIME, QUICK)
    version = store.publish(Target.TIME, result.files, result.card, make_current=False)
    now = result.card["training"]["last_submit_epoch"] + 3600  # the clock is right again

    with caplog.at_level(logging.WARNING):
        verdict = challenge(store, Target.TIME, version, result.window, BUDGET, now=now)
    assert "older jobs" not in verdict.reason and verdict.champion is not None, verdict.reason
    assert "the first half of those after the champion's" in verdict.reason
    assert "is ahead of this host's clock: taken as unknown" in verdict.reason
    assert f"time: champion {name} was trained on jobs submitted up to " in caplog.text

    # A second after the clock: no slack (training leaves out a job submitted within it whose run
    # ends ahead, and every challenger looked older until the clock reached that end).
    verdict = challenge(store, Target.TIME, version, result.window, BUDGET, now=stamped - 1)
    assert "older jobs" not in verdict.reason and "taken as unknown" in verdict.reason, verdict.reason
    # Stamped no later than the clock: its end stands, the challenger is older.
    verdict = challenge(store, Target.TIME, version, result.window, BUDGET, now=stamped)
    assert not verdict.promote and "trained on older jobs than the champion" in verdict.reason
