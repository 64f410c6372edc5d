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
from slurm_harp.core.tag import as_submitted
from slurm_harp.learning.dataset import build_dataset
from slurm_harp.learning.limit_outcomes import assess
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


@pytest.mark.parametrize(
    ("shown", "tag", "own"),
    [
        # --mem-per-cpu 2000 on 4 CPUs, one node; harp lowered it to 500 MB a CPU (2000 MB a node).
        ((500, 4, 1), "m!=2000,m0=8000", (2000, 4, 8000.0)),
        # 1000 MB a CPU on 16 CPUs over 2 nodes; harp cut the CPUs to 4 and set 1500 MB a CPU.
        ((1500, 4, 2), "m!=3000,m0=8000,c!=4,c0=16", (1000, 16, 8000.0)),
        # 1001 MB a CPU on 3 CPUs over 2 nodes: m0 rounds 1501.5 MB a node; the user's own comes back.
        ((400, 3, 2), "m!=600,m0=1502", (1001, 3, 1501.5)),
    ],
)
def test_a_per_cpu_memory_request_harp_lowered_is_learnt_with_its_user_s_own(
    shown: tuple[int, int, int], tag: str, own: tuple[int, int, float]
) -> None:
    """A --mem-per-cpu job: the plugin rewrites its MB per CPU, the tag's m0 is MB per node (the
    daemon's unit). Before, only a per-node request got m0 back: the job was learnt and scored with
    harp's lowered memory as its user's request. ``shown``: accounting's MB per CPU, CPUs, nodes."""
    per_cpu, cpus, nodes = shown
    request = JobRequest(user_name="alice", time_limit_minutes=60, submit_time=SUBMIT, mem_per_cpu_mb=per_cpu,
                         min_cpus=cpus, min_nodes=nodes)  # fmt: skip
    record = JobRecord("1", request, "COMPLETED", 600, end_time=SUBMIT + 600, max_rss_mb=300.0,
                       harp_tag=f"harp:rewrite,{tag},v=x")  # fmt: skip
    submitted = as_submitted(record).request
    assert (submitted.mem_per_cpu_mb, submitted.min_cpus, submitted.mem_per_node_mb) == (*own[:2], None)
    assert submitted.requested(Target.MEMORY) == pytest.approx(own[2])
    td = target_data([record], build_dataset([record]), Target.MEMORY)
    assert td.requested[0] == pytest.approx(own[2])


def test_a_time_min_job_cut_by_backfill_and_stopped_there_counts_as_killed() -> None:
    """time_min mode: backfill started the job with its limit cut to 30 min toward harp's time_min,
    and it timed out there before its user's own 120: a limit below its run kills it, as a limit
    harp lowered does (before: censored like a job that reached its own limit)."""
    cut = job("1", 30, 30 * 60 + 20, "harp:time_min,t~=30,t0=120,v=x", state="TIMEOUT")
    td = target_data([cut], build_dataset([cut]), Target.TIME)
    assert list(td.requested) == [120]
    assert td.stopped_by_harp is not None and list(td.stopped_by_harp) == [True]
    assert assess(np.array([30.0]), td)[0] == 100.0
