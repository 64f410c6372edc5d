from __future__ import annotations

import pytest

from slurm_harp.accounting import load_records
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.evaluation.split import chronological_split, known_before
from slurm_harp.evaluation.strategy import Split
from tests.conftest import BUNDLED_TRACE, REPO


def job(job_id: str, submit: int | None, run: int = 100, end: int | None = None) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        request=JobRequest(submit_time=submit, time_limit_minutes=10),
        state="COMPLETED",
        elapsed_s=run,
        end_time=end if end is not None else (None if submit is None else submit + run),
    )


def test_sorted_by_submit_and_cut_by_fractions() -> None:
    jobs = [job(str(i), submit=1000 - i) for i in range(10)]
    timeline = chronological_split(jobs)
    assert [j.job_id for j in timeline.jobs] == [str(i) for i in range(9, -1, -1)]
    assert timeline.split == Split(train_end=6, validation_end=8)
    assert timeline.windows() == {"train": (0, 6), "validation": (6, 8), "test": (8, 10)}
    assert chronological_split(jobs, (0.5, 0.3)).split == Split(5, 8)


def test_drops_zero_run_and_unplaceable_jobs() -> None:
    jobs = [job("a", 10), job("b", 20, run=0), job("c", None), job("d", 5, run=-1), job("e", 30)]
    timeline = chronological_split(jobs)
    assert [j.job_id for j in timeline.jobs] == ["a", "e"]
    assert timeline.dropped == 3


def test_equal_submit_times_keep_input_order() -> None:
    jobs = [job(name, 50) for name in "xyz"]
    assert [j.job_id for j in chronological_split(jobs).jobs] == ["x", "y", "z"]


@pytest.mark.parametrize("fractions", [(0.0, 0.2), (0.6, 0.0), (0.8, 0.2), (0.9, 0.3)])
def test_bad_fractions(fractions: tuple[float, float]) -> None:
    with pytest.raises(ValueError):
        chronological_split([job("a", 1)], fractions)


def test_known_before_leaves_out_jobs_running_at_the_cutoff() -> None:
    # Validation opens at t=100; job 1 ends at 150 (after), job 2 exactly at 100 (known).
    jobs = [job("0", 0, end=50), job("1", 10, end=150), job("2", 20, end=100), job("3", 100), job("4", 110)]
    assert known_before(jobs, 3).tolist() == [0, 2]
    assert known_before(jobs, 0).tolist() == []


def test_a_job_harp_lowered_is_read_with_its_users_own_request() -> None:
    """On a site's own jobs accounting shows the limit harp set (40 min): every strategy's baseline
    is the user's own (the tag's t0=120), as training reads it."""
    tag = "harp:rewrite,t!=40,t0=120,v=time@1"
    lowered = JobRecord("1", JobRequest(submit_time=1000, time_limit_minutes=40), "COMPLETED", 100,
                        end_time=1100, harp_tag=tag)  # fmt: skip
    timeline = chronological_split([lowered, job("2", 2000), job("3", 3000)], (0.4, 0.3))
    assert [j.request.time_limit_minutes for j in timeline.jobs] == [120, 10, 10]
    assert timeline.jobs[0].harp_tag == tag


def test_the_share_of_validation_jobs_running_when_test_opens_is_the_one_the_docs_quote() -> None:
    """`harp evaluate` calibrates every strategy on the whole validation window, the jobs still
    running when the test window opens included (known_only is False): docs/evaluation.md says
    how many there are on the bundled KTH-SP2 trace, which this counts."""
    timeline = chronological_split(load_records(BUNDLED_TRACE))
    first, end = timeline.windows()["validation"]
    known = known_before(timeline.jobs, end)
    running = (end - first) - int(((known >= first) & (known < end)).sum())
    share = f"{running} of {end - first:,} validation jobs ({100 * running / (end - first):.1f} %)"
    assert share == "18 of 5,693 validation jobs (0.3 %)"
    assert share in " ".join((REPO / "docs" / "evaluation.md").read_text().split())
