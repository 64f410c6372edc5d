"""Invariants on random small workloads: the head job's reservation is never delayed by a backfill,
processors are never over-committed, every job starts once per attempt and ends."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.simulation import simulate
from slurm_harp.simulation.backfill import SlurmBackfill
from slurm_harp.simulation.easy import Easy
from slurm_harp.simulation.engine import Result, Scheduler
from slurm_harp.simulation.limits import LimitSource, PredictedLimits, RequestLimits, TsafrirLimits
from slurm_harp.simulation.workload import Workload

# Predicted limits are fractions of run times: float sums carry rounding.
EPS = 1e-9


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    processors = draw(st.integers(1, 8))
    count = draw(st.integers(1, 14))
    rows = []
    for i in range(count):
        run = draw(st.integers(0, 120))
        rows.append(
            (
                str(i),
                float(draw(st.integers(0, 200))),
                float(run),
                # Mostly requests above the run time, some below it (killed at the request).
                float(max(1, run + draw(st.integers(-30, 150)))),
                draw(st.integers(1, processors)),
                draw(st.integers(0, 3)),
            )
        )
    return Workload.build(processors, rows)


@st.composite
def schedulers(draw: st.DrawFn) -> Scheduler:
    if draw(st.booleans()):
        return Easy()
    return SlurmBackfill(
        bf_max_job_test=draw(st.integers(1, 6)),
        bf_resolution=draw(st.sampled_from([1, 7, 60])),
        bf_interval=draw(st.sampled_from([0, 5, 30])),
    )


def check_conservation(w: Workload, r: Result) -> None:
    att = r.attempts
    # Every job ends, after it was submitted; each attempt ends once.
    assert not any(math.isnan(s) for s in r.start)
    assert not any(math.isnan(e) for e in r.end)
    finals = [j for j, early in zip(att.job, att.killed_early, strict=True) if not early]
    assert sorted(finals) == list(range(len(w)))
    for j, s, e in zip(att.job, att.start, att.end, strict=True):
        assert s >= w.submit[j]
        assert e - s <= w.request[j] + EPS
    for j in range(len(w)):
        assert r.end[j] - r.start[j] == pytest.approx(min(w.run[j], w.request[j]))
    # Processors in use never exceed the machine (ends before starts at one instant).
    changes = sorted(
        [(e, 0, -w.procs[j]) for j, e in zip(att.job, att.end, strict=True)]
        + [(s, 1, w.procs[j]) for j, s in zip(att.job, att.start, strict=True)]
    )
    busy = 0
    for _, _, delta in changes:
        busy += delta
        assert busy <= w.processors


@settings(max_examples=300, deadline=None)
@given(workloads(), schedulers())
def test_the_head_jobs_reservation_is_never_delayed(w: Workload, scheduler: Scheduler) -> None:
    # With the requests as limits every job ends by its planned end, so nothing may start the
    # first waiting job later than the reservation it got when it came first in line.
    r = simulate(w, scheduler, RequestLimits(w), record_reservations=True)
    check_conservation(w, r)
    for job, reserved in r.head_reservation.items():
        assert r.start[job] <= reserved, (job, r.start[job], reserved)


@settings(max_examples=200, deadline=None)
@given(workloads(), schedulers(), st.sampled_from(["tsafrir", "easy++", "rewrite", "time_min", "extend"]))
def test_every_source_conserves_jobs_and_processors(w: Workload, scheduler: Scheduler, name: str) -> None:
    # Predictions from a fraction of the real run time: some too short, some too long.
    predictions = [max(1.0, run * f) for run, f in zip(w.run, [0.5, 1.3, 0.9, 2.0] * 4, strict=False)]
    source: LimitSource
    if name in ("tsafrir", "easy++"):
        source = TsafrirLimits(w, shortest_first=name == "easy++")
    else:
        source = PredictedLimits(w, predictions, name)
    r = simulate(w, scheduler, source)
    check_conservation(w, r)
    if name != "rewrite":
        assert not any(r.attempts.killed_early)
