"""`harp evaluate --db` on a site's own jobs reads what harp did to them as training does: a job a
limit of harp's stopped counts as finished under its own request (a lower limit newly kills it), and
time waste is weighed by the CPUs its user asked for, not the fewer harp cut it to. The evaluation's
figures (evaluation.costs.assess) and training's (learning.limit_outcomes.assess) are one rule."""

from __future__ import annotations

import numpy as np
import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.split import chronological_split
from slurm_harp.learning import limit_outcomes
from slurm_harp.learning.dataset import build_dataset
from slurm_harp.learning.targets import target_data

V = "time@20261101T000000.000000Z"
T0 = 1_790_000_000


def job(i: int, minutes: float, state: str = "COMPLETED", *, limit: int = 100, cpus: int = 1,
        tag: str | None = None) -> JobRecord:  # fmt: skip
    """Job ``i``, submitted in order; accounting shows ``limit`` and ``cpus`` (harp's, where it cut them)."""
    request = JobRequest(user_name="alice", partition="a", min_cpus=cpus, time_limit_minutes=limit,
                         submit_time=T0 + i * 10_000)  # fmt: skip
    return JobRecord(str(i), request, state, int(minutes * 60), start_time=T0 + i * 10_000,
                     end_time=T0 + i * 10_000 + int(minutes * 60), alloc_cpus=cpus,
                     total_cpu_s=cpus * minutes * 60, censored=state == "TIMEOUT", harp_tag=tag)  # fmt: skip


def both(jobs: list[JobRecord], limits: np.ndarray) -> tuple[tuple[float, float], tuple[float, float]]:
    """(newly killed %, waste cut %) of ``limits`` on ``jobs`` (in submit order): as `harp evaluate`
    reads them, and as training does."""
    timeline = chronological_split(jobs, (0.3, 0.3))
    figures = costs.assess(observe(timeline.jobs, Target.TIME), limits)
    evaluation = (figures["newly_killed_pct"] or 0.0, figures["waste_cut_pct"] or 0.0)
    training = limit_outcomes.assess(limits, target_data(jobs, build_dataset(jobs), Target.TIME))
    return evaluation, training


def test_a_job_harps_limit_stopped_is_newly_killed_by_a_lower_limit_in_evaluate_as_in_training() -> None:
    """Rewrite mode cut job 0 from 100 to 60 min and it timed out there: it needed more than 60 of
    its own 100. A strategy giving it 50 kills it. `harp evaluate` read it as stopped at its own
    limit (censored): newly killed 0 %, and its waste left out (cut 66.7 %); training 33.3 %, 76.9 %."""
    jobs = [job(0, 60, "TIMEOUT", limit=60, tag=f"harp:rewrite,t!=60,t0=100,v={V}"), job(1, 30), job(2, 80)]
    evaluation, training = both(jobs, np.array([50.0, 50.0, 90.0]))
    assert evaluation == pytest.approx(training)
    # Job 0 newly killed; waste as asked 40 + 70 + 20, under the limits 20 + 10 (job 0's gone with it).
    assert evaluation == pytest.approx((100 / 3, 100 * (1 - 30 / 130)))


def test_time_waste_weighs_the_cpus_the_user_asked_for_not_harps_cut() -> None:
    """Rewrite mode cut job 0's CPUs from 16 to 4 (accounting shows 4). As submitted it reserves 16
    CPUs x its limit, as `harp report` counts it: `harp evaluate` weighed its waste by harp's 4."""
    cut = job(0, 60, cpus=4, tag=f"harp:rewrite,c!=4,c0=16,v={V}")
    jobs = [cut, job(1, 60)]
    assert observe(chronological_split(jobs, (0.3, 0.3)).jobs, Target.TIME).cores.tolist() == [16.0, 1.0]
    assert target_data(jobs, build_dataset(jobs), Target.TIME).waste_weight.tolist() == [16.0, 1.0]
    evaluation, training = both(jobs, np.array([70.0, 90.0]))
    assert evaluation == pytest.approx(training)
    # Waste as asked 16 x 40 + 1 x 40, under the limits 16 x 10 + 1 x 30.
    assert evaluation[1] == pytest.approx(100 * (1 - 190 / 680))


def test_evaluate_and_training_agree_on_a_site_s_own_jobs() -> None:
    """A mix of what harp does to jobs: stopped at its cut (rewrite, extend with the guard down),
    at a limit backfill cut toward its time_min, at the user's own limit, CPUs cut; any limits."""
    rng = np.random.default_rng(7)
    jobs = []
    stopped_in = {0: "rewrite,t!", 1: "extend,t!", 2: "time_min,t~"}  # the guard down in extend mode
    for i in range(300):
        kind, run = i % 6, int(rng.integers(5, 95))
        if kind in stopped_in:
            jobs.append(job(i, run, "TIMEOUT", limit=run, tag=f"harp:{stopped_in[kind]}={run},t0=100,v={V}"))
        elif kind == 3:
            jobs.append(job(i, 100, "TIMEOUT"))  # its user's own limit stopped it
        elif kind == 4:
            jobs.append(job(i, run, cpus=2, tag=f"harp:rewrite,t!=99,t0=100,c!=2,c0=8,v={V}", limit=99))
        else:
            jobs.append(job(i, run))
    limits = np.where(rng.random(300) < 0.2, np.nan, rng.integers(1, 120, 300).astype(float))
    evaluation, training = both(jobs, limits)
    assert evaluation == pytest.approx(training)
    assert evaluation[0] > 10  # harp's kills are in it
