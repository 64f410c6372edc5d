"""`harp guard` and a real slurmctld that comes back from state saved before the guard's extension
(a crash, or a backup taking over: slurmctld saves its state at most every few seconds).

The job, cut to 3 of its user's 10 minutes, is extended once 30 s have run. slurmctld is then
killed and started again from a copy of its state taken before the extension: the job is listed at
3 minutes again. Before, the guard took that for its user lowering the limit, never extended it
again, and Slurm stopped it at harp's cut. Now the guard reads slurmctld's start (BOOT_TIME), sees
another slurmctld listing the drop, and extends the job again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.test_guard import GuardProcess
from tests.e2e.test_guard_changes import (
    EXTEND,
    followed,
    guard,
    log_of,
    polled,
    squeue,
    submit,
    update,
    wait_for,
)

__all__ = ["guard"]  # the fixture (a running guard, the test's jobs cancelled after), for pytest

# A minute of waiting on a real job: scripts/test runs this module beside the others so marked.
pytestmark = pytest.mark.side_by_side


@pytest.fixture(scope="module")
def cluster(start_module_cluster: StartCluster) -> SlurmCluster:
    """A cluster of its own: its slurmctld is restarted from older state."""
    return start_module_cluster(nodes=1, cpus_per_node=2)


def test_an_extension_slurmctld_lost_in_a_restart_is_made_again(
    cluster: SlurmCluster, guard: GuardProcess, tmp_path: Path
) -> None:
    job = submit(cluster)
    wait_for("the job to run", lambda: squeue(cluster, job)[0] == "RUNNING")
    update(cluster, job, f"AdminComment={EXTEND}", "TimeLimit=3")  # cut: due once 30 s have run
    cluster.restart_controller()  # TERM: its state, the job at 3 minutes, saved
    saved = tmp_path / "state-before"
    shutil.copytree(cluster.state_dir, saved)
    wait_for("the guard to extend it", lambda: squeue(cluster, job)[1] != "3:00", timeout=90)
    extended = squeue(cluster, job)[1]
    polled(tmp_path)  # the guard saw the raise listed, and which slurmctld holds it
    polled(tmp_path)

    cluster.restart_controller(saved, crash=True)  # back from the state before the extension
    # The guard's next poll lists the job at 3 minutes again and extends it at once (it is due):
    # too soon for squeue to be sure to see 3:00, so its log says what it listed.
    lost = f"job {job}: limit {extended.split(':')[0]} -> 3 min, down from its latest raise (from 3 min)"
    wait_for("the guard to list the extension lost", lambda: lost in log_of(tmp_path), timeout=60)
    wait_for(
        "the guard to extend it again", lambda: log_of(tmp_path).count(f"job {job}: time limit 3 ->") == 2
    )
    state, limit, _ = squeue(cluster, job)
    assert (state, limit) == ("RUNNING", extended), log_of(tmp_path)
    said = log_of(tmp_path)
    assert "taken for its state from before the raise, not a lowering" in said, said
    assert "while it ran (by its user or an admin)" not in said, said
    entry = followed(tmp_path, job)
    assert entry is not None and entry[6] is None, entry  # no lowering kept for it
