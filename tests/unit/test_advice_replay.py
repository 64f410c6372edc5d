"""evaluation.advice_replay: the advice met at each job's submission, its costs, by hand."""

from __future__ import annotations

import itertools

import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.evaluation.advice_replay import (
    History,
    Pick,
    Replay,
    flat_tariff,
    replay,
    site_cap,
    summarise,
)

IDS = itertools.count(1)
TARIFF = flat_tariff(1000)  # 1 per CPU-hour, MaxTime 1000 min: costs are core-hours


def job(
    cpus: int,
    minutes: float,
    submit: int = 0,
    *,
    user: str = "ann",
    name: str = "sim",
    state: str = "COMPLETED",
    request: int | None = None,
) -> JobRecord:
    """A run of ``name`` by ``user`` submitted at ``submit``, started at once."""
    elapsed = round(minutes * 60)
    asked = JobRequest(
        user_name=user, job_name=name, min_cpus=cpus, submit_time=submit, time_limit_minutes=request
    )
    return JobRecord(
        job_id=str(next(IDS)), request=asked, state=state, elapsed_s=elapsed, start_time=submit,
        end_time=submit + elapsed, alloc_cpus=cpus,
    )  # fmt: skip


# Ann's runs of "sim" (recommend's example): 40 and 90 min on 1 CPU, 30 on 4: slope -1/2. Options:
# 1 CPU limit 99, 190/3 min expected; 2 CPUs limit 71; 4 CPUs limit 50, 95/3 min expected.
ANN = [job(1, 40), job(1, 90), job(4, 30)]
LATER = 10_000  # submitted after all of them ended


def test_the_history_is_what_had_ended_by_the_submission() -> None:
    first, second = job(1, 10, 0), job(1, 10, 600)  # end at 600 and 1200
    others = [job(1, 1, 0, user="bob"), job(1, 1, 0, name="other")]
    history = History([first, second, *others])
    assert history.before(job(1, 1, 599), 10) == []
    assert history.before(job(1, 1, 600), 10) == [first]  # ended at the submission: known
    assert history.before(job(1, 1, 1200), 10) == [first, second]
    assert history.before(job(1, 1, 1200), 1) == [second]  # the newest by submit time
    assert history.before(job(1, 1, 1200, user="cy"), 10) == []


def test_the_site_cap_is_the_longest_request_or_run() -> None:
    assert site_cap([job(1, 30, request=60), job(1, 90, request=45)]) == 90
    assert site_cap([job(1, 30, request=120)]) == 120


def test_a_job_at_the_fits_size_its_cheapest_and_its_deadline() -> None:
    # Ann's next run: 4 CPUs, 30 minutes, asking for 60. The cheapest is 1 CPU; within 60 minutes
    # only 4 CPUs is sure to end (the longest runs: 90 min on 1 CPU, 63.6 on 2, 45 on 4).
    r = replay(job(4, 30, LATER, request=60), ANN, TARIFF)
    assert (r.sizes, r.size, r.minutes, r.completed) == (2, 4, 30, True)
    assert r.cost == pytest.approx(2.0) and r.slope == pytest.approx(-0.5)
    assert r.own == r.in_deadline
    assert r.own is not None and r.own.size == 4 and r.own.limit_minutes == 50
    assert r.own.quoted == pytest.approx(4 * 95 / 3 / 60)
    assert r.own.minutes == pytest.approx(30) and r.own.replayed == pytest.approx(2.0)  # finishes under 50
    # On 1 CPU the 30 minutes become 30 x (1/4) ** -0.5 = 60, under the limit 99: 1 core-hour.
    assert r.cheapest is not None and r.cheapest.size == 1 and r.cheapest.limit_minutes == 99
    assert r.cheapest.quoted == pytest.approx(190 / 3 / 60)
    assert r.cheapest.minutes == pytest.approx(60) and r.cheapest.replayed == pytest.approx(1.0)


def test_a_replayed_run_past_the_limit_is_run_again() -> None:
    # 55 minutes on 4 CPUs: killed at 50, run again: 50 + 55 minutes. On 1 CPU: 110 > 99: 99 + 110.
    r = replay(job(4, 55, LATER), ANN, TARIFF)
    assert r.own is not None and r.own.replayed == pytest.approx(4 * 105 / 60)
    assert r.cheapest is not None and r.cheapest.replayed == pytest.approx(209 / 60)
    assert r.in_deadline == r.cheapest  # no request: no deadline


def test_no_replay_outside_the_fit_and_no_advice_without_evidence_or_completion() -> None:
    outside = replay(job(8, 30, LATER), ANN, TARIFF)  # 8 CPUs: beyond the sizes run
    assert outside.own is None and outside.cheapest is not None
    assert (
        outside.cheapest.size == 1 and outside.cheapest.replayed is None and outside.cheapest.minutes is None
    )
    failed = replay(job(4, 30, LATER, state="FAILED"), ANN, TARIFF)
    assert failed.sizes == 2 and not failed.completed and failed.cheapest is None
    alone = replay(job(4, 30, LATER), [], TARIFF)
    assert alone.sizes == 0 and alone.cheapest is None and alone.slope is None
    one_size = replay(job(1, 30, LATER), ANN[:2], TARIFF)
    assert one_size.sizes == 1 and one_size.slope is None


def pick(size: int, quoted: float, replayed: float | None, minutes: float | None = None) -> Pick:
    return Pick(size=size, limit_minutes=60, quoted=quoted, minutes=minutes, replayed=replayed)


def test_the_summary_by_hand() -> None:
    same = pick(4, 3.0, 5.0, minutes=30)  # at its own size: rerun once, 5 instead of 4
    smaller = pick(1, 1.0, 1.5, minutes=90)
    replays = [
        Replay(2, 4, 30, 4.0, True, -0.5, own=same, cheapest=smaller, in_deadline=same),
        Replay(1, 2, 30, 1.0, True, None, own=None, cheapest=pick(2, 0.5, None), in_deadline=None),
        Replay(1, 2, 30, 1.0, False, None, cheapest=pick(2, 0.5, float("inf"))),  # as if past the cap
        Replay(2, 8, 30, 4.0, False, 0.25),  # failed: covered, not scored
        Replay(0, 1, 60, 1.0, True),  # no evidence
    ]
    f = summarise(replays)
    assert (f["jobs"], f["cost"]) == (5, 11.0)
    assert f["covered1_pct"] == 80 and f["covered1_cost_pct"] == pytest.approx(100 * 10 / 11)
    assert f["covered2_pct"] == 40 and f["covered2_cost_pct"] == pytest.approx(100 * 8 / 11)
    # The cheapest on the two scored jobs: quoted 1.0 + 0.5 against 4 + 1; replayed only the first.
    assert f["s1_jobs"] == 2 and f["s1_cost"] == 5.0
    assert f["s1_cheapest_answered_pct"] == 100 and f["s1_cheapest_changed_pct"] == 50
    assert f["s1_cheapest_smaller_pct"] == 50
    assert f["s1_cheapest_quoted_saving_pct"] == pytest.approx(70)
    assert f["s1_cheapest_replayed_jobs"] == 1 and f["s1_cheapest_replayed_saving_pct"] == pytest.approx(62.5)
    assert f["s1_cheapest_replayed_median_saving"] == pytest.approx(2.5)
    assert f["s1_cheapest_changed_median_stretch"] == pytest.approx(3.0)  # 90 min for 30
    # Within the deadline: the first keeps its size (replayed 5 > 4: a loss), the second has none.
    assert f["s1_deadline_answered_pct"] == 50 and f["s1_deadline_changed_pct"] == 0
    assert f["s1_deadline_quoted_saving_pct"] == pytest.approx(100 * (5 - 4) / 5)
    assert f["s1_deadline_replayed_saving_pct"] == pytest.approx(-25)
    assert f["s2_jobs"] == 1 and f["s2_slope_median"] == -0.5 and f["s2_slope_nonneg_pct"] == 0
    assert f["s2neg_jobs"] == 1 and f["s1neg_jobs"] == 2
    # The model check at the jobs' own sizes: quoted 3, realized 5 under the advice's limit, 4 own.
    assert (f["check_own_jobs"], f["check_own_quoted"], f["check_own_realized"], f["check_own_actual"]) == (
        1, 3.0, 5.0, 4.0,
    )  # fmt: skip
    assert f["check_own_rerun_pct"] == 100 and f["check_own_median_ratio"] == pytest.approx(0.6)
    # The cheapest at the job's own size: replayed for the first job only, past the cap.
    assert f["check_same_jobs"] == 1 and f["check_same_unfinished_pct"] == 100 and f["check_same_quoted"] == 0


def test_nothing_to_summarise() -> None:
    f = summarise([])
    assert f["jobs"] == 0 and f["covered1_pct"] is None and f["s1_cheapest_replayed_saving_pct"] is None


def test_fits_with_a_slope_of_zero_or_more_are_set_apart() -> None:
    # Larger runs that took longer did other work: their fit's advice is left out of s2neg and s1neg.
    replays = [
        Replay(2, 4, 30, 4.0, True, -0.5, cheapest=pick(1, 1.0, 2.0, minutes=60)),
        Replay(2, 4, 30, 4.0, True, 0.5, cheapest=pick(1, 0.1, 0.1, minutes=15)),
        Replay(1, 2, 30, 1.0, True, None, cheapest=pick(2, 1.0, 1.0, minutes=30)),
    ]
    f = summarise(replays)
    assert (f["s1_jobs"], f["s2_jobs"], f["s2neg_jobs"], f["s1neg_jobs"]) == (3, 2, 1, 2)
    assert f["s2_slope_nonneg_pct"] == 50 and f["s2_slope_median"] == 0
    assert f["s1_cheapest_replayed_saving_pct"] == pytest.approx(100 * (9 - 3.1) / 9)
    assert f["s1neg_cheapest_replayed_saving_pct"] == pytest.approx(100 * (5 - 3) / 5)
    assert f["s2neg_cheapest_changed_median_stretch"] == pytest.approx(2)
