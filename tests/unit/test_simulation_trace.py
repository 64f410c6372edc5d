"""The simulator on the bundled KTH-SP2 trace, read through the adapter."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_harp.accounting import swf_processors
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.simulation import catalog, load_workload, measure, simulate
from slurm_harp.simulation.limits import PredictedLimits
from slurm_harp.simulation.trace import workload_from_records
from slurm_harp.simulation.workload import predictions_by_job
from tests.conftest import BUNDLED_TRACE


def test_the_swf_header_gives_the_machine_size(tmp_path: Path) -> None:
    assert swf_processors(BUNDLED_TRACE) == 100
    plain = tmp_path / "t.swf"
    job = "1 0 0 10 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1"
    plain.write_text(f"; MaxNodes: 64\n; MaxProcs: 128 (two per node)\n{job}\n")
    assert swf_processors(plain) == 128
    assert load_workload(plain).processors == 128
    assert load_workload(plain, processors=8).processors == 8


def test_easy_plus_plus_beats_easy_on_kth() -> None:
    # Tsafrir et al. (2007) report EASY -> EASY++ bounded slowdown 90 -> 57 on this trace.
    jobs = load_workload(BUNDLED_TRACE)
    easy = measure(simulate(jobs, catalog.scheduler("easy"), catalog.limits("request", jobs)))
    plus = measure(simulate(jobs, catalog.scheduler("easy"), catalog.limits("easy++", jobs)))
    assert plus.mean_bsld < 0.85 * easy.mean_bsld
    assert plus.mean_wait_s < easy.mean_wait_s
    assert easy.killed_early_jobs == plus.killed_early_jobs == 0


def test_two_jobs_of_one_id_each_get_their_own_planned_limit() -> None:
    """A job store may hold several jobs of one id (an id given again): planned limits go by id and
    submit time, or the older job ran with the newer one's limit."""
    older, newer = (
        JobRecord("7", JobRequest(submit_time=t, min_cpus=1, time_limit_minutes=60), "COMPLETED", 600)
        for t in (100, 5000)
    )
    jobs = workload_from_records([newer, older], processors=4)
    assert list(zip(jobs.ids, jobs.submit, strict=True)) == [("7", 100.0), ("7", 5000.0)]
    assert predictions_by_job(jobs, {("7", 100.0): 900.0, ("7", 5000.0): 1200.0}) == [900.0, 1200.0]


def test_ours_backfills_in_queue_order_as_requests_do() -> None:
    """With predictions equal to the requests, ours' rows are the requests' row, start for start:
    they differ by their limits alone. Ours tried backfill candidates shortest plan first (EASY++'s
    SJBF), and part of its gain over the requests was that order's (the simulator audit)."""
    jobs = load_workload(BUNDLED_TRACE).head(3000)
    easy = catalog.scheduler("easy")
    requests = simulate(jobs, easy, catalog.limits("request", jobs))
    for mode in ("ours-time_min", "ours-extend", "ours-rewrite"):
        ours = simulate(jobs, easy, catalog.limits(mode, jobs, list(jobs.request)))
        assert ours.start == requests.start, mode
    sjbf = simulate(jobs, easy, PredictedLimits(jobs, list(jobs.request), "extend", shortest_first=True))
    assert sjbf.start != requests.start  # the order alone moves starts on this stretch


def test_a_trace_without_any_time_limit_is_refused() -> None:
    """Each job's request would be its own run time: a requests row that knows every run time."""
    records = [
        JobRecord(str(i), JobRequest(submit_time=100 * i, min_cpus=1), "COMPLETED", 300) for i in range(3)
    ]
    with pytest.raises(ValueError, match="no job has a time limit"):
        workload_from_records(records, processors=4)


def test_a_job_harp_lowered_is_replayed_with_its_users_own_request() -> None:
    """`harp simulate --db`: the job store shows the limit harp set (and the CPUs it left); the
    replay's "request" is what the user asked (the tag's t0=, c0=)."""
    request = JobRequest(user_name="u", time_limit_minutes=40, min_cpus=4, submit_time=1000)
    lowered = JobRecord("1", request, "COMPLETED", 600, end_time=1600, alloc_cpus=4,
                        harp_tag="harp:rewrite,t!=40,t0=120,c!=4,c0=16,v=v1")  # fmt: skip
    plain = JobRecord("2", replace(request, submit_time=2000), "COMPLETED", 600, end_time=2600, alloc_cpus=4)
    jobs = workload_from_records([lowered, plain], processors=16)
    assert list(jobs.request) == [120 * 60, 40 * 60] and list(jobs.procs) == [16, 4]


def test_a_job_that_asked_for_no_limit_is_marked_and_replayed_with_the_longest() -> None:
    # Submitted in the other order: the marks follow the jobs through the sort by submit time.
    asked = JobRecord("1", JobRequest(time_limit_minutes=30, min_cpus=1, submit_time=200), "COMPLETED", 60)
    unasked = JobRecord("2", JobRequest(min_cpus=1, submit_time=100), "COMPLETED", 60)
    jobs = workload_from_records([asked, unasked], processors=4)
    assert list(jobs.ids) == ["2", "1"] and list(jobs.request) == [1800, 1800]
    assert jobs.no_request == {0}
    assert jobs.head(1).no_request == {0} and not jobs.head(0).no_request


def test_records_of_which_none_can_be_replayed_are_refused_saying_why() -> None:
    records = [JobRecord("1", JobRequest(time_limit_minutes=10, min_cpus=1), "COMPLETED", 300)]
    with pytest.raises(ValueError, match=r"no job to replay: 1 jobs read \(1 with no submit time\)"):
        workload_from_records(records, processors=4)


def test_jobs_all_wider_than_the_machine_are_refused_saying_so() -> None:
    """Workload.build drops jobs wider than the machine after the check for none: a table of NaN."""
    wide = [JobRecord(str(i), JobRequest(time_limit_minutes=10, min_cpus=8, submit_time=i), "COMPLETED", 60)
            for i in range(3)]  # fmt: skip
    no_submit = JobRecord("x", JobRequest(time_limit_minutes=10, min_cpus=1), "COMPLETED", 60)
    message = r"4 jobs read \(1 with no submit time; 3 wider than the machine of 4 processors\)"
    with pytest.raises(ValueError, match=message):
        workload_from_records([*wide, no_submit], processors=4)
