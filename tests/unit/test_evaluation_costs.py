from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import Observed, observe

NAN = math.nan


def obs(
    requested: list[float],
    actual: list[float],
    *,
    target: Target = Target.TIME,
    censored: list[bool] | None = None,
    cores: list[float] | None = None,
    run_hours: list[float] | None = None,
    units: list[float] | None = None,
) -> Observed:
    n = len(requested)
    hours = run_hours if run_hours is not None else [a / 60 for a in actual]
    return Observed(
        target=target,
        requested=np.array(requested, dtype=float),
        actual=np.array(actual, dtype=float),
        censored=np.array(censored or [False] * n),
        cores=np.array(cores or [1.0] * n, dtype=float),
        run_hours=np.array(hours, dtype=float),
        units=np.array(units or [1.0] * n, dtype=float),
        stopped_by_harp=np.zeros(n, dtype=bool),
    )


def test_effective_limits_keep_round_floor_and_cap() -> None:
    o = obs([60, 60, 60, 60, 60], [10, 10, 10, 10, 10])
    limits = np.array([NAN, 12.2, 0.2, 500.0, 60.0])
    # NaN keeps the request; 12.2 -> 13 whole minutes; 0.2 -> Slurm's 1-minute floor; capped at 60.
    assert costs.effective_limits(o, limits).tolist() == [60, 13, 1, 60, 60]


def test_censored_jobs_are_killed_earlier_not_newly() -> None:
    # Job 0 finished (40 <= 60); job 1 censored at its request; job 2 censored past it (an SWF
    # overrun); job 3 finished well under its limit.
    o = obs([60, 60, 60, 60], [40, 60, 90, 5], censored=[False, True, True, False])
    unchanged = costs.effective_limits(o, np.full(4, NAN))
    assert not costs.killed(o, unchanged).any()  # the request itself kills nobody "newly"
    lowered = costs.effective_limits(o, np.array([30.0, 59.0, 59.0, 30.0]))
    # Censored jobs whose limit drops below what they ran are killed earlier (re-execution counts it)...
    assert costs.killed(o, lowered).tolist() == [True, True, True, False]
    # ...but only a job that used to finish is newly killed, and the kill budget counts only those.
    assert costs.newly_killed(o, lowered).tolist() == [True, False, False, False]
    assert costs.killed_fraction(o, np.array([30.0, 59.0, 59.0, 30.0])) == pytest.approx(0.25)


def test_waste_is_weighted_by_cores_and_skips_killed_and_censored() -> None:
    # Cores 1, 2, 4, 8; job 3 censored (no waste counted either way).
    o = obs([60, 120, 30, 60], [10, 100, 30, 60], cores=[1, 2, 4, 8], censored=[False, False, False, True])
    before = (1 * 50 + 2 * 20 + 4 * 0) / 60  # core-hours
    assert costs.waste(o, o.requested) == pytest.approx(before)
    limits = np.array([20.0, 90.0, NAN, NAN])  # job 1 killed at 90 < 100: its waste is gone
    after = (1 * 10) / 60
    assert costs.waste(o, costs.effective_limits(o, limits)) == pytest.approx(after)
    assert costs.waste_cut_pct(o, limits) == pytest.approx(100 * (1 - after / before))


def test_cut_without_kills_gives_no_credit_for_a_kill() -> None:
    # Job 1 (2 cores) is newly killed at 90 < 100: the waste cut counts its 40 core-minutes of waste
    # as gone; the cut without kills leaves them. Job 3 is censored: no waste either way.
    o = obs([60, 120, 60, 60], [10, 100, 30, 60], cores=[1, 2, 1, 1], censored=[False, False, False, True])
    figures = costs.assess(o, np.array([20.0, 90.0, NAN, 30.0]))
    before = 50 + 2 * 20 + 30  # core-minutes
    assert figures["waste_cut_pct"] == pytest.approx(100 * (1 - (10 + 30) / before))
    assert figures["kill_free_cut_pct"] == pytest.approx(100 * (1 - (10 + 2 * 20 + 30) / before))
    # Without a kill the two are one figure.
    safe = costs.assess(o, np.array([20.0, 110.0, NAN, NAN]))
    assert safe["kill_free_cut_pct"] == pytest.approx(safe["waste_cut_pct"])
    # CPUs slow, never kill: no such figure.
    cpus = costs.assess(obs([8], [2], target=Target.CPUS, run_hours=[1.0]), np.array([3.0]))
    assert cpus["kill_free_cut_pct"] is None


def test_reexecution_doubles_until_the_job_fits() -> None:
    # Run 100 min on 4 cores under a 1000-min request, first limit 10: attempts 10, 20, 40, 80 are
    # killed, 160 finishes. Extra = 4 cores x (10 + 20 + 40 + 80) minutes.
    o = obs([1000], [100], cores=[4])
    total, extra = costs.reexecution(o, np.array([10.0]))
    assert extra == pytest.approx(4 * 150 / 60)
    assert total == pytest.approx(4 * 100 / 60 + extra)


def test_reexecution_last_attempt_runs_with_the_request() -> None:
    # Request 50, run 45: limits 10, 20, 40 killed; the next would be 80, capped at 50: finishes.
    o = obs([50], [45])
    _, extra = costs.reexecution(o, np.array([10.0]))
    assert extra == pytest.approx(70 / 60)
    # A censored job (hit its 60-min request): 20, 40 killed, then 60 = request, as it really ran.
    c = obs([60], [60], censored=[True], cores=[2])
    total, extra = costs.reexecution(c, np.array([20.0]))
    assert extra == pytest.approx(2 * 60 / 60)
    assert total == pytest.approx(2 * 1.0 + extra)
    # A job that fits costs nothing extra.
    assert costs.reexecution(o, np.array([45.0]))[1] == 0.0


def test_memory_oom_attempts_cost_the_whole_run() -> None:
    # Peak 900 MB, request 1000, limit 300: 300 and 600 are OOM-killed; each attempt is charged
    # the full 2-hour run on 8 cores (the peak may come at the end).
    o = obs([1000], [900], target=Target.MEMORY, cores=[8], run_hours=[2.0], units=[2])
    total, extra = costs.reexecution(o, np.array([300.0]))
    assert extra == pytest.approx(2 * 8 * 2.0)
    assert total == pytest.approx(8 * 2.0 + extra)
    # Waste in MB-hours: 2 nodes x (limit - peak) x 2 h.
    assert costs.waste(o, o.requested) == pytest.approx(2 * 100 * 2.0)


def test_cpus_slow_instead_of_kill() -> None:
    # Request 8 CPUs, used 2 over 1 h, and request 4, used 4 over 2 h.
    o = obs([8, 4], [2, 4], target=Target.CPUS, run_hours=[1.0, 2.0])
    figures = costs.assess(o, np.array([3.0, 2.0]))
    # Job 0 keeps 1 idle CPU (was 6); job 1 is slowed (2 CPUs for what needed 4): no idle core.
    assert figures["waste_cut_pct"] == pytest.approx(100 * (1 - 1 / 6))
    assert figures["slowed_pct"] == pytest.approx(50.0)
    assert figures["newly_killed_pct"] is None and figures["reexec_extra_core_h"] is None
    # Allocated core-hours: before 8 + 8 = 16; after 3 x 1 + 4 x 2 (the slowed job stretches).
    assert figures["alloc_core_h_cut_pct"] == pytest.approx(100 * (1 - 11 / 16))


def test_assess_scores_only_usable_jobs() -> None:
    o = obs([60, NAN, 60], [30, 30, 90], censored=[False, False, True])
    figures = costs.assess(o, np.array([45.0, 10.0, NAN]))
    assert figures["n"] == 2
    assert figures["upp"] == pytest.approx(50.0)  # the censored job ran past its request
    assert figures["newly_killed_pct"] == 0.0
    assert figures["lowered_pct"] == pytest.approx(50.0)
    assert figures["waste_cut_pct"] == pytest.approx(50.0)
    assert figures["aea"] == pytest.approx((30 / 45 + 60 / 90) / 2)


def record(request: JobRequest, **kw: object) -> JobRecord:
    fields: dict[str, object] = {"job_id": "1", "state": "COMPLETED", "elapsed_s": 600}
    fields.update(kw)
    return JobRecord(request=request, **fields)  # type: ignore[arg-type]


def test_observe_units_per_target() -> None:
    swf = record(
        JobRequest(mem_per_cpu_mb=6, min_cpus=128, time_limit_minutes=30), max_rss_mb=5.0, alloc_cpus=128
    )
    slurm = record(
        JobRequest(mem_per_node_mb=4000, min_nodes=2, min_cpus=8),
        state="OUT_OF_MEMORY",
        max_rss_mb=4000.0,
        total_cpu_s=2400.0,
    )
    memory = observe([swf, slurm], Target.MEMORY)
    # SWF: per processor on both sides; Slurm: per node.
    assert memory.requested.tolist() == [6.0, 4000.0]
    assert memory.units.tolist() == [128.0, 2.0]
    assert memory.censored.tolist() == [False, True]
    assert swf.requested(Target.MEMORY) == 6.0
    cpus = observe([swf, slurm], Target.CPUS)
    assert math.isnan(cpus.actual[0]) and cpus.actual[1] == pytest.approx(4.0)
    time = observe([swf, slurm], Target.TIME)
    assert time.actual.tolist() == [10.0, 10.0]
    assert time.cores.tolist() == [128.0, 8.0]


def test_newly_killed_leaves_censored_jobs_out() -> None:
    o = obs([60, 60, 60, 60], [40, 60, 90, 5], censored=[False, True, True, False])
    figures = costs.assess(o, np.array([30.0, 59.0, 59.0, 30.0]))
    assert figures["newly_killed_pct"] == pytest.approx(25.0)  # only the job that used to finish
    assert figures["censored_lowered_pct"] == pytest.approx(50.0)  # killed earlier than before


def test_extend_mode_kills_nothing_and_counts_the_guard_s_extensions() -> None:
    # Requests 60 min; runs 5, 12, 30 and 70 (the last hits its own request: censored).
    o = obs([60, 60, 60, 60], [5, 12, 30, 60], censored=[False, False, False, True])
    limits = np.array([10.0, 10.0, 10.0, 10.0])
    finals, counts = costs.extended(o, limits, lead_s=120.0)
    # 10 -> 11 -> 15 (12 min run); 10 -> 11 -> 15 -> 25 -> 40 (30 min run); the censored job to 60.
    assert finals.tolist() == [10, 15, 40, 60] and counts.tolist()[:3] == [0, 2, 4]
    figures = costs.assess(o, limits)
    assert figures["newly_killed_pct"] == 50.0  # in rewrite mode the 12 and 30 min jobs die at 10
    assert figures["extend_killed_pct"] == 0.0
    assert figures["extended_pct"] == 75.0
    # Waste of the finished jobs: request 55 + 48 + 30 core-min; extend mode 5 + 3 + 10.
    assert figures["extend_waste_cut_pct"] == pytest.approx(100 * (1 - 18 / 133))
    assert figures["extensions_max"] == counts.max()


def test_extend_figures_are_for_time_only() -> None:
    memory = costs.assess(obs([100, 100], [50, 80], target=Target.MEMORY), np.array([60.0, 60.0]))
    assert "extend_waste_cut_pct" not in memory
