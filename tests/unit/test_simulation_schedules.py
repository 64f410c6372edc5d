"""Small schedules computed by hand: each test says why its figures are what they are."""

from __future__ import annotations

import math

from slurm_harp.simulation import catalog, simulate
from slurm_harp.simulation.backfill import SlurmBackfill
from slurm_harp.simulation.easy import Easy
from slurm_harp.simulation.engine import Result
from slurm_harp.simulation.limits import PredictedLimits, RequestLimits, TsafrirLimits
from slurm_harp.simulation.schedule_metrics import measure
from slurm_harp.simulation.workload import Workload

NAN = math.nan


def jobs(processors: int, *rows: tuple[float, float, float, int, int]) -> Workload:
    """Rows of (submit, run, request, procs, user); job ids are their row numbers."""
    return Workload.build(processors, [(str(i), *row) for i, row in enumerate(rows)])


def easy_request(w: Workload) -> Result:
    return simulate(w, Easy(), RequestLimits(w), record_reservations=True)


# A holds 3 of 4 processors until 100; B needs all 4, so it is reserved at 100 with no extra processor.
BLOCKED = [(0, 100, 100, 3, 0), (1, 50, 50, 4, 1)]


def test_easy_backfills_a_job_that_ends_before_the_reservation() -> None:
    w = jobs(4, *BLOCKED, (2, 50, 50, 1, 2))
    r = easy_request(w)
    # C (1 processor, limit 50) ends by 52 <= 100: it starts at once and B is not delayed.
    assert r.start == [0, 100, 2]
    assert r.head_reservation[1] == 100


def test_easy_does_not_backfill_a_job_that_would_delay_the_reservation() -> None:
    # Same C, but its limit (200) says it could run past 100, and no processor is spare then.
    w = jobs(4, *BLOCKED, (2, 50, 200, 1, 2))
    r = easy_request(w)
    assert r.start == [0, 100, 150]


def test_easy_backfills_a_long_job_on_the_extra_processors() -> None:
    # A holds 2 of 4 until 100; B needs 3, so at 100 one processor is extra: a long 1-wide job fits.
    w = jobs(4, (0, 100, 100, 2, 0), (1, 50, 50, 3, 1), (2, 400, 500, 1, 2), (3, 400, 500, 1, 3))
    r = easy_request(w)
    # The first long job takes the extra processor; the second would take one B needs.
    assert r.start == [0, 100, 2, 150]


def test_a_job_is_killed_at_its_request() -> None:
    w = jobs(4, (0, 100, 60, 1, 0))
    r = easy_request(w)
    assert (r.start, r.end) == ([0], [60])
    m = measure(r, warmup=0)
    assert (m.killed_at_request_jobs, m.killed_early_jobs) == (1, 0)


def test_rewrite_kills_at_the_prediction_and_runs_again_with_the_request() -> None:
    w = jobs(4, (0, 50, 100, 2, 0))
    r = simulate(w, Easy(), PredictedLimits(w, [30.0], "rewrite"))
    # Killed at 30, submitted again at 30 with its request of 100: runs 30-80.
    assert (r.start, r.end) == ([30], [80])
    assert r.attempts.killed_early == [True, False]
    m = measure(r, warmup=0)
    assert m.killed_early_jobs == 1
    assert m.lost_core_hours == 2 * 30 / 3600
    assert m.rerun_core_hours == 2 * 50 / 3600
    assert m.mean_wait_s == 30


def test_tsafrir_predicts_the_mean_of_the_last_two_and_corrects_to_the_request() -> None:
    w = jobs(
        2,
        (0, 10, 1000, 1, 0),
        (0, 20, 1000, 1, 0),
        # Predicted (10 + 20) / 2 = 15; it runs 100, so at 45 the prediction becomes the request.
        (30, 100, 1000, 2, 0),
        # Reserved at 45 (the prediction's end), then at 1030 once the correction is made.
        (31, 50, 50, 2, 1),
    )
    r = simulate(w, Easy(), TsafrirLimits(w), record_reservations=True)
    assert r.start == [0, 0, 30, 130]
    assert r.head_reservation[3] == 45
    assert r.extensions == 1
    assert r.extension_delays == [1030 - 45]


def test_tsafrir_uses_the_request_until_the_user_has_two_ended_jobs() -> None:
    w = jobs(4, (0, 10, 1000, 1, 0), (20, 10, 500, 1, 0))
    source = TsafrirLimits(w)
    assert source.submitted(0, 0).planned == 1000
    source.ended(0, 10, 10)
    assert source.submitted(1, 20).planned == 500


def test_extend_raises_the_limit_as_the_guard_does_and_delays_the_reservation() -> None:
    # Job 0 is predicted 10 min but runs 1000 s. The guard's steps, each 120 s (its lead) before the
    # limit: at 480 s to 11 min (660 s), at 540 to 10 + 5 min (900 s), at 780 to 10 + 15 (1500 s);
    # B's reservation moves from 600 to 660, 900 and 1500.
    w = jobs(2, (0, 1000, 100_000, 2, 0), (1, 10, 10, 2, 1))
    r = simulate(w, Easy(), PredictedLimits(w, [600.0, NAN], "extend"), record_reservations=True)
    assert r.start == [0, 1000]
    assert r.extensions == 3
    assert r.extension_delays == [60, 240, 600]
    assert measure(r, warmup=0).killed_early_jobs == 0


def test_time_min_starts_a_backfill_with_a_cut_limit_then_extends_it() -> None:
    # A holds 3 of 4 until 6000 s; B needs 4. C keeps its request but may start with a limit down
    # to 50 min: it starts at 120 with 98 min (ending at B's reservation, 6000), is still running
    # 120 s before that, and is extended as the guard extends a time_min job: by a step from its
    # prediction (50 + 60 min = 110 min: B's reservation moves to 6720), then to 50 + 120 min at
    # 6600 (to 10,320). It ends at 7320, and B starts.
    w = jobs(4, (0, 6000, 6000, 3, 0), (60, 3000, 3000, 4, 1), (120, 7200, 30_000, 1, 2))
    r = simulate(w, Easy(), PredictedLimits(w, [NAN, NAN, 3000.0], "time_min"), record_reservations=True)
    assert r.start == [0, 7320, 120]
    assert r.end[2] == 7320
    assert r.extension_delays == [720, 3600]
    assert measure(r, warmup=0).killed_early_jobs == 0


def test_time_min_does_not_cut_below_the_floor() -> None:
    w = jobs(4, *BLOCKED, (2, 40, 500, 1, 2))
    r = simulate(w, Easy(), PredictedLimits(w, [NAN, NAN, 99.0], "time_min"))
    # 2 + 99 > 100: even the shortest allowed limit would run past the reservation.
    assert r.start == [0, 100, 150]


def test_easy_plus_plus_backfills_shortest_first() -> None:
    # One processor is free until 100. Two candidates fit before it; SJBF takes the shorter first.
    w = jobs(4, *BLOCKED, (2, 60, 60, 1, 2), (2, 30, 30, 1, 3))
    fcfs = simulate(w, Easy(), TsafrirLimits(w))
    sjbf = simulate(w, Easy(), TsafrirLimits(w, shortest_first=True))
    assert fcfs.start[2:] == [2, 62]
    assert sjbf.start[2:] == [32, 2]


def test_slurm_backfill_rounds_to_its_resolution_and_waits_for_its_interval() -> None:
    w = jobs(4, *BLOCKED, (2, 50, 50, 1, 2))
    # A's end (100) rounds up to 120; C (50 -> 60) fits before it; the pass after B's is at 1 + 30.
    r = simulate(w, SlurmBackfill(), RequestLimits(w), record_reservations=True)
    assert r.start == [0, 100, 31]
    assert r.head_reservation[1] == 120
    immediate = simulate(w, SlurmBackfill(bf_interval=0), RequestLimits(w))
    assert immediate.start == [0, 100, 2]


def test_slurm_backfill_does_not_start_a_job_that_would_delay_a_reservation() -> None:
    # C's limit 100 rounds to 120: from 2 it would hold a processor past B's reservation at 120.
    w = jobs(4, *BLOCKED, (2, 50, 100, 1, 2))
    r = simulate(w, SlurmBackfill(bf_interval=0), RequestLimits(w))
    assert r.start == [0, 100, 150]


def test_slurm_backfill_tests_only_bf_max_job_test_jobs() -> None:
    w = jobs(4, *BLOCKED, (2, 50, 50, 1, 2))
    r = simulate(w, SlurmBackfill(bf_interval=0, bf_max_job_test=1), RequestLimits(w))
    assert r.start == [0, 100, 150]


def test_slurm_backfill_reserves_for_every_job_it_tests() -> None:
    # B is reserved at 100-150 on all 4; D (2 wide) at 150. C could fit before 150 by B's
    # reservation alone but not by D's (2 + 200 > 150, and only 2 of 4 stay free): it waits.
    w = jobs(4, (0, 100, 100, 3, 0), (1, 50, 50, 4, 1), (1, 100, 100, 4, 2), (2, 200, 200, 1, 3))
    r = simulate(w, SlurmBackfill(bf_interval=0, bf_resolution=1), RequestLimits(w))
    assert r.start == [0, 100, 150, 250]


def test_catalog_builds_every_named_source() -> None:
    w = jobs(4, (0, 10, 20, 1, 0))
    names = [catalog.limits(n, w, [5.0]).name for n in catalog.LIMITS]
    assert names == list(catalog.LIMITS)


def test_the_conditional_extension_jumps_to_the_run_time_of_jobs_that_outlived_their_prediction() -> None:
    # 30 jobs one after the other, each predicted 10 min and running 30. The guard's steps extend
    # each four times (to 11, 15, 25 and 40 min). The conditional extension does the same while
    # fewer than 20 jobs have ended; then it extends at once to the 0.8 quantile of the ended jobs'
    # ratio (3, in the bin whose upper edge is 10^(20/40) = 3.16: 32 min): one extension each.
    rows = [(2400 * i, 1800, 100_000, 1, 0) for i in range(30)]
    w = jobs(1, *rows)
    steps = simulate(w, Easy(), PredictedLimits(w, [600.0] * 30, "extend"))
    conditional = simulate(w, Easy(), PredictedLimits(w, [600.0] * 30, "extend", extension="conditional"))
    assert steps.extensions == 30 * 4
    assert conditional.extensions == 20 * 4 + 10 * 1
    assert measure(conditional, warmup=0).killed_early_jobs == 0
    assert conditional.end == steps.end  # extending never changes when a job ends, only the plan


def test_the_conditional_extension_forgets_jobs_that_ended_before_its_window() -> None:
    # As above, but the last job comes 31 days after the 20th: the guard's harvested ratios hold
    # only the last 30 days' jobs, so it has steps alone again (four extensions, not one).
    rows = [(2400 * i, 1800, 100_000, 1, 0) for i in range(20)] + [(31 * 86400, 1800, 100_000, 1, 0)]
    w = jobs(1, *rows)
    r = simulate(w, Easy(), PredictedLimits(w, [600.0] * 21, "extend", extension="conditional"))
    assert r.extensions == 21 * 4
