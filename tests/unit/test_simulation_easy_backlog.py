"""EASY through its width index (Backlog) starts exactly the jobs its plain scan starts.

The plain scan (``indexed_from`` above any queue) tries every waiting job in turn, as EASY did before
the index; the indexed scan tries only the jobs that may start. Random workloads, queues long and
short, every limit source (queue order and shortest first, time_min floors, rewrite's re-runs).
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_harp.simulation import backlog, simulate
from slurm_harp.simulation.backlog import Backlog, Key
from slurm_harp.simulation.easy import Easy
from slurm_harp.simulation.limits import LimitSource, PredictedLimits, RequestLimits, TsafrirLimits
from slurm_harp.simulation.workload import Workload

SOURCES = ("request", "tsafrir", "easy++", "rewrite", "time_min", "extend")
PLAIN = 10**9


def source(name: str, w: Workload, seed: int) -> LimitSource:
    if name == "request":
        return RequestLimits(w)
    if name in ("tsafrir", "easy++"):
        return TsafrirLimits(w, shortest_first=name == "easy++")
    rng = random.Random(seed)
    # Some too short (killed in rewrite, extended otherwise), some too long, some none.
    predictions = [
        max(1.0, run * rng.choice([0.3, 0.7, 1.0, 1.5, 3.0])) if rng.random() < 0.8 else math.nan
        for run in w.run
    ]
    return PredictedLimits(w, predictions, name)


@st.composite
def crowded(draw: st.DrawFn) -> Workload:
    """Up to 120 jobs arriving faster than a small machine serves them: queues of dozens."""
    processors = draw(st.integers(1, 16))
    rng = random.Random(draw(st.integers(0, 2**32)))
    rows = []
    for i in range(draw(st.integers(1, 120))):
        run = float(rng.choice([0, rng.randint(1, 600)]))
        request = float(max(1, run + rng.randint(-60, 900)))
        # Submit times on a coarse grid: ties at one instant too.
        submit = float(rng.randint(0, 300) * rng.choice([1, 10]))
        rows.append((str(i), submit, run, request, rng.randint(1, processors), rng.randint(0, 4)))
    return Workload.build(processors, rows)


@settings(max_examples=400, deadline=None)
@given(
    crowded(),
    st.sampled_from(SOURCES),
    st.integers(0, 1000),
    st.sampled_from([0, 1, 4, 12]),
    st.sampled_from([1, 3, backlog.BLOCK]),
)
def test_the_indexed_scan_starts_what_the_plain_scan_starts(
    w: Workload, name: str, seed: int, indexed_from: int, block: int
) -> None:
    plain = simulate(w, Easy(indexed_from=PLAIN), source(name, w, seed), record_reservations=True)
    default, backlog.BLOCK = backlog.BLOCK, block  # small blocks: splits and empty blocks
    try:
        indexed = simulate(
            w, Easy(indexed_from=indexed_from), source(name, w, seed), record_reservations=True
        )
    finally:
        backlog.BLOCK = default
    assert indexed.start == plain.start
    assert indexed.end == plain.end
    assert indexed.attempts == plain.attempts
    assert indexed.head_reservation == plain.head_reservation


def test_the_backlog_finds_the_first_job_that_may_start() -> None:
    b = Backlog()
    # (job, width, key, shortest limit), keys in queue order.
    for job, width, shortest in [(0, 4, 50.0), (1, 1, 500.0), (2, 2, 30.0), (3, 1, 20.0), (4, 3, 10.0)]:
        b.add(job, width, (job, job), shortest)
    assert b.first(free=2, extra=0, slack=100.0) == 2  # 1 is too long, 2 fits and is short
    assert b.first(free=2, extra=1, slack=100.0) == 1  # 1 fits on the spare processor
    assert b.first(free=1, extra=0, slack=100.0) == 3
    assert b.first(free=3, extra=0, slack=15.0) == 4
    assert b.first(free=1, extra=0, slack=15.0) is None
    entry = b.remove(2)
    assert b.first(free=2, extra=0, slack=100.0) == 3
    b.add(2, *entry)
    assert b.first(free=2, extra=0, slack=100.0) == 2
    for job in range(5):
        b.remove(job)
    assert len(b) == 0 and b.first(free=10, extra=10, slack=math.inf) is None


def test_the_backlog_answers_as_a_search_of_every_waiting_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backlog, "BLOCK", 2)
    rng = random.Random(7)
    b, waiting = Backlog(), dict[int, tuple[int, Key, float]]()
    for step in range(4000):
        if waiting and rng.random() < 0.45:
            job = rng.choice(list(waiting))
            assert b.remove(job) == waiting.pop(job)
        else:
            # Keys out of order too (shortest-first order inserts anywhere).
            waiting[step] = (
                rng.randint(1, 6),
                (rng.choice([step, rng.random() * step]), step),
                float(rng.randint(1, 50)),
            )
            b.add(step, *waiting[step])
        free, extra, slack = rng.randint(0, 7), rng.randint(0, 4), float(rng.randint(0, 60))
        passing = [
            key
            for width, key, shortest in waiting.values()
            if width <= free and (width <= extra or shortest <= slack)
        ]
        assert b.first(free, extra, slack) == (min(passing)[-1] if passing else None)
    assert len(b) == len(waiting)
