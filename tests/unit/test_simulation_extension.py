"""The simulator extends as `harp guard` does: core.extension's own rule, the same inputs."""

from __future__ import annotations

import itertools

import pytest

from slurm_harp.core.extension import DEFAULT_LEAD_S, ConditionalRatios, extensions_needed, next_limit
from slurm_harp.simulation import simulate
from slurm_harp.simulation.easy import Easy
from slurm_harp.simulation.limits import PredictedLimits
from slurm_harp.simulation.workload import Workload

LEAD = DEFAULT_LEAD_S
PREDICTIONS = (1, 2, 7, 10, 45, 600)  # minutes
REQUESTS = (2, 3, 12, 60, 61, 1440, 100_000)


def grid() -> list[tuple[int, int]]:
    return [(p, r) for p, r in itertools.product(PREDICTIONS, REQUESTS) if p < r]


def guard_limits(prediction: int, request: int, ratios: ConditionalRatios | None) -> list[int]:
    """Every limit the guard gives a job that runs on, each asked at the lead (as it polls)."""
    limits = [prediction]
    while (ext := next_limit(prediction, limits[-1], request, max(0.0, limits[-1] * 60 - LEAD), LEAD,
                             ratios=ratios)) is not None:  # fmt: skip
        limits.append(ext.new_limit)
    return limits


def source_limits(source: PredictedLimits, job: int, request: int) -> list[int]:
    limits = [source.submitted(job, 0.0).planned]
    while limits[-1] < request * 60:
        limits.append(source.expired(job, 0.0, limits[-1]))
    return [round(limit / 60) for limit in limits]


@pytest.mark.parametrize("extension", ["steps", "conditional"])
def test_every_new_limit_is_the_guards_for_the_same_job(extension: str) -> None:
    jobs = grid()
    history = [1.5] * 30 + [4.0] * 10 + [30.0] * 25  # run time / prediction of ended jobs
    w = Workload.build(
        4,
        [(str(i), 0, 60, 60 * r, 1, 0) for i, (_, r) in enumerate(jobs)]
        + [(f"h{i}", 0, 60 * ratio, 120, 1, 0) for i, ratio in enumerate(history)],
    )
    source = PredictedLimits(
        w, [60.0 * p for p, _ in jobs] + [60.0] * len(history), "extend", extension=extension
    )
    for job, ratio in enumerate(history, start=len(jobs)):
        source.ended(job, 0.0, 60 * ratio)
    ratios = ConditionalRatios(history) if extension == "conditional" else None
    for job, (prediction, request) in enumerate(jobs):
        assert source_limits(source, job, request) == guard_limits(prediction, request, ratios), (
            prediction,
            request,
        )


@pytest.mark.parametrize(("prediction", "own"), grid())
def test_a_replayed_job_is_extended_as_often_as_the_guard_would(prediction: int, own: int) -> None:
    # Run times around each limit the guard gives, 7 s either side of the moment it acts (the lead
    # before the limit): a job that ends within the lead is extended, as the guard extends it.
    moments = {60 * limit - LEAD for limit in guard_limits(prediction, own, None)}
    for run in sorted({max(1.0, m + d) for m in moments for d in (-7.0, 7.0)}):
        w = Workload.build(1, [("0", 0, run, 60 * own, 1, 0)])
        r = simulate(w, Easy(), PredictedLimits(w, [60.0 * prediction], "extend"))
        count, _ = extensions_needed(prediction, run, own, LEAD)
        assert r.extensions == count, run


def test_limits_go_to_the_guards_rule_in_whole_minutes_as_slurm_holds_them() -> None:
    # Predicted 618 s: Slurm holds 11 min, so the steps are 11 + 1 and 11 + 5 min; the next,
    # 11 + 15, is cut to the request, 17 min as Slurm holds 1000 s, and to 1000 s itself here.
    w = Workload.build(1, [("0", 0, 5000, 1000, 1, 0)])
    source = PredictedLimits(w, [618.0], "extend")
    assert source.expired(0, 0.0, 618.0) == 720.0
    assert source.expired(0, 0.0, 720.0) == 960.0
    assert source.expired(0, 0.0, 960.0) == 1000.0
