"""Learning from jobs harp changed: accounting shows the limit harp set (or the guard extended a job
to), the daemon saw the user's own; and a job harp's limit stopped is a kill, not a job that reached
its own limit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.job import JobRecord
from slurm_harp.core.key_history import outcome_of
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.learning.calibration import assess
from slurm_harp.learning.dataset import build_dataset
from slurm_harp.learning.targets import target_data

SUBMIT = 1_800_000_000


def job(job_id: str, limit: int, elapsed_s: int, tag: str | None, state: str = "COMPLETED") -> JobRecord:
    request = JobRequest(user_name="alice", time_limit_minutes=limit, min_cpus=1, submit_time=SUBMIT)
    return JobRecord(
        job_id, request, state, elapsed_s, start_time=SUBMIT, end_time=SUBMIT + elapsed_s,
        censored=state == "TIMEOUT", harp_tag=tag,
    )  # fmt: skip


def test_a_job_the_guard_extended_is_learnt_with_its_user_s_own_limit() -> None:
    """Extend mode: the guard raised the cut 40 min to 62 as the job ran 61; its user asked 600.
    Before, training read 62 (the run time, nearly: a leak of the label into the features) where
    the daemon, serving, reads 600."""
    extended = job("1", 62, 61 * 60, "harp:extend,t!=40,t0=600,v=x")
    data = build_dataset([extended])
    assert data.requested_min[0] == 600
    column = FEATURE_NAMES.index("log_time_limit_min")
    assert data.x[0, column] == pytest.approx(math.log1p(600), rel=1e-6)
    assert target_data([extended], data, Target.TIME).requested[0] == 600
    outcome = outcome_of(extended)  # the history's run / request ratio, training's and the daemon's
    assert outcome is not None and outcome[4] == pytest.approx(61 / 600)
    untagged = job("2", 62, 61 * 60, None)
    assert build_dataset([untagged]).requested_min[0] == 62


def test_a_job_harp_s_limit_stopped_counts_as_killed_by_a_limit_below_its_run() -> None:
    """Rewrite mode: harp cut 120 min to 30 and the job timed out there. Before, it was censored like
    a job that reached its own limit, and no limit was ever charged with killing it: a champion that
    killed 1.7 % of its jobs was judged at 0 %."""
    killed = job("1", 30, 30 * 60 + 20, "harp:rewrite,t!=30,t0=120,v=x", state="TIMEOUT")
    own = job("2", 30, 30 * 60 + 20, None, state="TIMEOUT")  # its user's own 30 min stopped it
    records = [killed, own]
    td = target_data(records, build_dataset(records), Target.TIME)
    assert list(td.requested) == [120, 30] and list(td.censored) == [True, True]
    assert td.stopped_by_harp is not None and list(td.stopped_by_harp) == [True, False]
    kill, _ = assess(np.array([30.0, 20.0]), td)
    assert kill == 50.0  # the job harp stopped at 30 min, under a 30 min limit again; not the other
    kill, _ = assess(np.array([31.0, 20.0]), td)
    assert kill == 0.0  # past the run it reached: unknown, not counted
