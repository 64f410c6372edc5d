from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.evaluation import costs, lineup, ours
from slurm_harp.evaluation.baselines import RequestStrategy, ScaledTsafrirStrategy, TsafrirStrategy
from slurm_harp.evaluation.frontier import Tunable
from slurm_harp.evaluation.harpstyle import HarpStyleStrategy
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.split import Timeline, chronological_split
from slurm_harp.evaluation.strategy import Strategy


def synthetic(n: int, seed: int = 0) -> Timeline:
    """Eight users, each with a typical run time and a request 2-9x above it; every 300th job
    hit its limit (killed whenever its limit is lowered). Jobs arrive every 5 minutes."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        user = int(rng.integers(0, 8))
        typical = 10.0 * (user + 1)
        run_min = float(np.clip(rng.lognormal(np.log(typical), 0.3), 1.0, None))
        limit = math.ceil(typical * (2 + user))
        censored = i % 300 == 0
        if censored:
            run_min = float(limit)
        submit = 1_000_000 + 300 * i
        jobs.append(
            JobRecord(
                job_id=str(i),
                request=JobRequest(
                    user_name=f"u{user}",
                    time_limit_minutes=limit,
                    min_cpus=user + 1,
                    mem_per_node_mb=1000 * (user + 1),
                    submit_time=submit,
                ),
                state="TIMEOUT" if censored else "COMPLETED",
                elapsed_s=round(run_min * 60),
                start_time=submit,
                end_time=submit + round(run_min * 60),
                censored=censored,
                max_rss_mb=float(rng.uniform(100, 400)) * (user + 1),
                alloc_cpus=user + 1,
            )
        )
    return chronological_split(jobs)


def validation_killed(strategy: Strategy, timeline: Timeline) -> float:
    s = timeline.split
    limits = strategy.limits(timeline.jobs, s.train_end)[: s.validation_end - s.train_end]
    return costs.killed_fraction(
        observe(timeline.jobs[s.train_end : s.validation_end], strategy.target), limits
    )


def test_request_keeps_everything() -> None:
    timeline = synthetic(100)
    strategy = RequestStrategy(Target.TIME)
    strategy.fit(timeline.jobs, timeline.split, 0.01)
    limits = strategy.limits(timeline.jobs, 30)
    assert limits.shape == (70,) and np.isnan(limits).all()
    assert not isinstance(strategy, Tunable)


def test_tsafrir_is_the_mean_of_the_last_two_capped_at_the_request() -> None:
    timeline = synthetic(400)
    jobs = timeline.jobs
    strategy = TsafrirStrategy(Target.TIME)
    strategy.fit(jobs, timeline.split, 0.01)
    limits = strategy.limits(jobs, 0)
    requested = observe(jobs, Target.TIME).requested
    assert np.nanmax(limits - requested) <= 0
    # Check one job by hand: the user's two most recently ended jobs before its submission.
    i = 300
    user = jobs[i].request.user_name
    ended = sorted(
        (j.end_time or 0, j.elapsed_s / 60)
        for j in jobs
        if j.request.user_name == user and (j.end_time or 0) < (jobs[i].request.submit_time or 0)
    )
    expected = min(float(np.mean([v for _, v in ended[-2:]])), requested[i])
    assert limits[i] == pytest.approx(expected)
    assert math.isnan(limits[0])  # nobody had ended yet: keep the request


def test_scaled_tsafrir_meets_the_budget_on_validation() -> None:
    timeline = synthetic(3000, seed=1)
    plain = TsafrirStrategy(Target.TIME)
    scaled = ScaledTsafrirStrategy(Target.TIME)
    for s in (plain, scaled):
        s.fit(timeline.jobs, timeline.split, 0.02)
    assert validation_killed(plain, timeline) > 0.02
    assert validation_killed(scaled, timeline) <= 0.02
    assert scaled.multiplier > 1.0 and scaled.knob() == {"multiplier": scaled.multiplier}
    assert isinstance(scaled, Tunable) and not isinstance(plain, Tunable)
    curve = scaled.pareto(timeline.jobs, timeline.split.validation_end)
    assert curve and all(0 <= k <= 100 for k, _ in curve)


@pytest.mark.parametrize("kind", ["linear", "tree", "mlp"])
def test_harp_style_learns_and_meets_the_budget(kind: str) -> None:
    timeline = synthetic(2000, seed=2)
    strategy = HarpStyleStrategy(Target.TIME, kind)  # type: ignore[arg-type]
    strategy.fit(timeline.jobs, timeline.split, 0.01)
    assert strategy.name == f"harp-{kind}"
    assert validation_killed(strategy, timeline) <= 0.01
    start = timeline.split.validation_end
    limits = strategy.limits(timeline.jobs, start)
    test = observe(timeline.jobs[start:], Target.TIME)
    assert limits.shape == (len(timeline.jobs) - start,)
    assert np.all(limits <= test.requested)
    # The request is 2-9x the typical run: a model of the user cuts real waste.
    assert costs.waste_cut_pct(test, limits) > 20


def test_harp_style_memory_and_no_cpu_data() -> None:
    timeline = synthetic(1500, seed=3)
    memory = HarpStyleStrategy(Target.MEMORY, "tree")
    memory.fit(timeline.jobs, timeline.split, 0.01)
    assert validation_killed(memory, timeline) <= 0.01
    test = observe(timeline.jobs[timeline.split.validation_end :], Target.MEMORY)
    assert costs.waste_cut_pct(test, memory.limits(timeline.jobs, timeline.split.validation_end)) > 20
    with pytest.raises(ValueError, match="training jobs"):  # no TotalCPU in these records
        HarpStyleStrategy(Target.CPUS, "tree").fit(timeline.jobs, timeline.split, 0.01)


def test_harp_style_refuses_bad_use() -> None:
    with pytest.raises(ValueError):
        HarpStyleStrategy(Target.TIME, "forest")  # type: ignore[arg-type]
    timeline = synthetic(100)
    with pytest.raises(RuntimeError):
        HarpStyleStrategy(Target.TIME, "linear").limits(timeline.jobs, 50)
    few = chronological_split(timeline.jobs[:40])
    with pytest.raises(ValueError):
        HarpStyleStrategy(Target.TIME, "linear").fit(few.jobs, few.split, 0.01)


def test_lineup_names_and_build() -> None:
    assert lineup.parse_names("baselines") == list(lineup.BASELINES)
    assert lineup.parse_names("request, tsafrir,request") == ["request", "tsafrir"]
    assert lineup.parse_names("all")[-1] == "ours"
    with pytest.raises(ValueError):
        lineup.parse_names("request,magic")
    with pytest.raises(ValueError):
        lineup.parse_names(" , ")
    for name in lineup.BASELINES:
        strategy = lineup.build(name, Target.TIME)
        assert strategy.name == name and strategy.target is Target.TIME


def test_ours_missing_or_refusing_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "slurm_harp.evaluation.ours", None)  # as without the train extra
    with pytest.raises(lineup.Unavailable, match="needs the train extra"):
        lineup.build("ours", Target.TIME)
    monkeypatch.undo()

    def refuse(target: Target) -> Strategy:
        raise NotImplementedError(f"no {target.value} model")

    monkeypatch.setattr(ours, "HarpStrategy", refuse)
    with pytest.raises(lineup.Unavailable, match="does not support target cpus"):
        lineup.build("ours", Target.CPUS)
