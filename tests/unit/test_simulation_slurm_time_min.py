"""The Slurm-like pass and time_min, computed by hand against what slurmctld 22.05 does.

sched/backfill (backfill.c) tests a waiting job that has a time_min with ``time_limit = time_min``;
if it cannot start now it reserves ``start + time_limit``, and if it can, it starts it with that
limit (in 22.05 "as high as possible" is comp_time_limit, which is the time_min). The main scheduler
(job_scheduler.c) starts jobs with their full limit: it reads time_min only to check a deadline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_harp.simulation.backfill import SlurmBackfill
from slurm_harp.simulation.engine import Simulation
from slurm_harp.simulation.limits import TimeMinLimits
from slurm_harp.simulation.workload import Workload

NAN = math.nan


def replay(
    processors: int, rows: Sequence[tuple[str, float, float, float, int]], floors: list[float]
) -> Simulation:
    """Rows (id, submit, run, request, procs), in submit order, and each job's time_min (NaN: none),
    replayed with Slurm's time_min and no guard; the Simulation, run to its end."""
    w = Workload.build(processors, [(*row, k) for k, row in enumerate(rows)])
    sim = Simulation(w, TimeMinLimits(w, floors), record_reservations=True)
    sim.run(SlurmBackfill(bf_interval=0, bf_resolution=1))
    return sim


def test_a_waiting_time_min_job_is_reserved_with_its_time_min() -> None:
    # 10 processors. A holds 8 until 100. B (4 wide, limit 1000 s, time_min 60 s) cannot start at 0:
    # it is tested with 60 s and reserved at 100-160 (not 100-1100). C (9 wide, 100 s) is then
    # reserved at 160-260, which leaves 1 processor free there: E (2 wide, 300 s) cannot backfill at 0.
    # At 100 A ends and the main scheduler starts B with its full 1000 s (not its time_min): C is now
    # reserved at 1100, and E backfills at 100. B runs 60 s, E 300 s: C starts at 400.
    rows = [("A", 0, 100, 100, 8), ("B", 0, 60, 1000, 4), ("C", 0, 100, 100, 9), ("E", 0, 300, 300, 2)]
    sim = replay(10, rows, [NAN, 60, NAN, NAN])
    assert sim.head_reservation[1] == 100
    assert sim.started_at == [0, 100, 400, 100]
    assert sim.planned[1] == 1000


def test_a_time_min_job_that_fits_now_starts_with_its_time_min_as_its_limit() -> None:
    # 4 processors. A holds 3 until 100; B (4 wide) is reserved at 100. C (1 wide, limit 1000 s,
    # time_min 50 s) fits now for 50 s: the pass starts it at 1 with a 50 s limit, though 99 s
    # would fit before B's reservation (slurmctld 22.05 starts it with its time_min).
    rows = [("A", 0, 100, 100, 3), ("B", 1, 50, 50, 4), ("C", 1, 40, 1000, 1)]
    sim = replay(4, rows, [NAN, NAN, 50])
    assert sim.started_at == [0, 100, 1]
    assert sim.planned[2] == 50


def test_a_time_min_job_that_does_not_fit_now_waits_for_its_reservation() -> None:
    # As above with time_min 100 s: C does not fit before B's reservation even with it. It is
    # reserved at 150 (after B) for 100 s, and there the main scheduler starts it with its full limit.
    rows = [("A", 0, 100, 100, 3), ("B", 1, 50, 50, 4), ("C", 1, 40, 1000, 1)]
    sim = replay(4, rows, [NAN, NAN, 100])
    assert sim.started_at == [0, 100, 150]
    assert sim.planned[2] == 1000


def test_a_job_running_past_the_time_min_it_started_with_still_holds_its_processors() -> None:
    """A started with its time_min (10 s) and, with no guard to raise it, runs on past it: its
    planned end is in the past, and the pass counted its processor free at once and started H (4
    wide) on 4 processors of which A held one. H starts when A ends (the review's case)."""
    sim = replay(4, [("X", 0, 100, 100, 3), ("H", 1, 50, 50, 4), ("A", 1, 500, 1000, 1)], [NAN, NAN, 10.0])
    started = {sim.workload.ids[job]: sim.started_at[job] for job in range(3)}
    assert started == {"X": 0.0, "A": 1.0, "H": 501.0}


def test_a_job_whose_planned_end_is_now_and_still_runs_holds_its_processors() -> None:
    """The same at the boundary: A (1 wide, time_min 60 s) backfills at 2 and runs 61 s; B arrives
    at 62, exactly A's planned end, and the pass run then counted A's processor free at 62 while A
    still held it: H (4 wide) started at 62 on 5 processors of 4. H starts when A ends, at 63."""
    rows = [("X", 0, 50, 100, 3), ("H", 1, 10, 100, 4), ("A", 2, 61, 120, 1), ("B", 62, 5, 60, 1)]
    sim = replay(4, rows, [NAN, NAN, 60.0, NAN])
    started = {sim.workload.ids[job]: sim.started_at[job] for job in range(4)}
    assert started["A"] == 2.0
    assert started["H"] == 63.0
