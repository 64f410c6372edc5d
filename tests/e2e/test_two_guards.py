"""Two `harp guard` processes on one real cluster (docs/guard.md: a second guard on the backup
controller host), each with its own state file and heartbeat, polling the same extend-mode jobs.

Guard A extends by the site's ended jobs (`extension = "conditional"`, from a job store the real
`harp harvest` summarised: 1 -> 3 min), the daemon reads its heartbeat; guard B by Tsafrir's steps
(`extension = "steps"`: 1 -> 2 min), with a lead a few seconds longer, so that it lists a job due
first, and its `scontrol update` slow (the real scontrol, SLOW_UPDATE_S late, as from a host far
from the controller): its lower extension lands after A has set and listed its higher one. That is
the case the unit tests build with a fake Slurm (tests/unit/test_guard_two_guards.py), here with
real jobs:
(1) a job cut to 1 min that runs 150 s, its user's own limit 5 min, is extended by both guards and
    COMPLETES;
(2) a job cut to 1 min that runs past its user's own 3 min is extended to it by both guards and
    stopped there, never later and never earlier (within KILL_SLACK_S);
(3) with both extensions of the first job made, B's the last to land, B is killed (SIGKILL): A
    alone extends the job to its completion (before, A took B's lower limit for its user's
    lowering and extended the job no more: it was killed at B's 2 min);
(4) neither guard reads a lowering ("limit lowered ... while it ran") in these jobs.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.daemon_process import DaemonProcess
from tests.e2e.test_guard import KILL_SLACK_S, GuardProcess, guard_cluster, submit, tag, wait_alive

# Minutes of waiting on real jobs: scripts/test runs this module beside the others so marked.
pytestmark = pytest.mark.side_by_side

POLL_S, STALE_S = 1, 5
# A's lead, and B's: B lists a job due LEAD_B_S - LEAD_A_S before A does.
LEAD_A_S, LEAD_B_S = 40, 45
# B's `scontrol update` lands this late: after A, due a few seconds after B, set its own and listed it.
SLOW_UPDATE_S = 12
# The second job starts this long after the first: each guard's extensions of one job are made in
# other polls than those of the other, and B is killed after it extended the first job to its own
# limit, before the second falls due again.
STAGGER_S = 35
# What the daemon cuts these short requests to (the bundled KTH model's median, at the floor).
CUT = 1


@dataclass
class Site:
    cluster: SlurmCluster
    a: GuardProcess  # conditional; its heartbeat is the one the daemon reads
    b: GuardProcess  # steps, slow updates

    def logs(self) -> tuple[str, str]:
        return self.a.log.read_text(), self.b.log.read_text()


def slow_scontrol(bin_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the real scontrol first in PATH behind a wrapper that makes updates SLOW_UPDATE_S late."""
    real = shutil.which("scontrol", path=env["PATH"])
    sleep = shutil.which("sleep")
    assert real and sleep
    bin_dir.mkdir()
    wrapper = bin_dir / "scontrol"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = update ]; then {sleep} {SLOW_UPDATE_S}; fi\nexec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return env | {"PATH": f"{bin_dir}:{env['PATH']}"}


def guard_section(directory: Path, lead_s: int, extension: str) -> str:
    directory.mkdir()
    return (
        f'[guard]\nheartbeat = "{directory / "hb"}"\nstate = "{directory / "limits.json"}"\n'
        f"poll_seconds = {POLL_S}\nlead_seconds = {lead_s}\nstale_seconds = {STALE_S}\n"
        f'extension = "{extension}"\n'
    )


@pytest.fixture
def site(
    start_cluster: StartCluster, trained_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    work = tmp_path_factory.mktemp("two-guards")
    cluster, store, db = guard_cluster(start_cluster, trained_store, work, nodes=2)
    policy = (
        'limits = "quantile"\nquantile = 0.5\n[policy.floor]\ntime_minutes = 1\n'
        '[[policy.rule]]\npartition = "debug"\nmode = "extend"\n'
        + guard_section(work / "a", LEAD_A_S, "conditional")
    )
    daemon = DaemonProcess(work, store, mode="shadow", extra=policy)
    daemon.start()
    # As in test_guard: the daemon has no job store (the test user would be a cold user in it).
    a_config = work / "a" / "harp.toml"
    a_config.write_text(daemon.config.read_text() + f'[history]\ndb = "{db}"\n')
    b_config = work / "b" / "harp.toml"
    b_config.write_text(guard_section(work / "b", LEAD_B_S, "steps"))
    a = GuardProcess(a_config, cluster.env, work / "a" / "guard.log")
    b = GuardProcess(b_config, slow_scontrol(work / "b" / "bin", cluster.env), work / "b" / "guard.log")
    try:
        yield Site(cluster, a, b)
    finally:
        a.stop()
        b.stop()
        daemon.stop()


def wait_for(what: str, check: Callable[[], bool], deadline: float, site: Site) -> None:
    while not check():
        if time.monotonic() > deadline:
            a_log, b_log = site.logs()
            raise AssertionError(f"timed out waiting for {what}\nA:\n{a_log[-3000:]}\nB:\n{b_log[-3000:]}")
        time.sleep(0.25)


def submit_cut(cluster: SlurmCluster, own: int, name: str, seconds: int) -> int:
    """An extend-mode job of ``own`` minutes running ``seconds``, checked to be cut to CUT minutes."""
    job = submit(cluster, "-p debug", f"-t {own}", f"-J {name}", body=f"sleep {seconds}").job_id
    assert job is not None
    mode, items = tag(cluster, job)
    assert mode == "extend" and items.get("t0") == str(own), (mode, items)
    cut = int(items["t!"].split("/")[0])
    assert cut == CUT, f"the model no longer cuts this job to {CUT} min ({cut}): the timings assume it"
    assert cluster.scontrol_show_job(job)["TimeLimit"] == f"00:{CUT:02d}:00"
    return job


def test_two_guards_extend_a_job_to_completion_and_stop_one_at_its_own_limit(site: Site) -> None:
    cluster = site.cluster
    for guard in (site.a, site.b):
        guard.start()
        wait_alive(guard.config.parent / "hb")

    over = submit_cut(cluster, 3, "over", 600)  # (2): past its own 3 min
    over_at = time.monotonic()
    time.sleep(max(0.0, over_at + STAGGER_S - time.monotonic()))
    done = submit_cut(cluster, 5, "done", 150)  # (1), (3): past its cut, within its own 5 min
    done_at = time.monotonic()

    # Both guards extended both jobs, B's lower extension landing last; B extended the overrunning
    # job to its own limit. B is killed then, before the other job falls due again under B's limit.
    late = r"job {}: limit 3 -> 2 min, above the 1 min before its latest raise: taken for another guard's"
    b_due_again = done_at + 2 * 60 - LEAD_B_S - 3
    wait_for(
        "B to extend the overrunning job to its own limit, and A to see B's extension of the other land",
        lambda: bool(
            re.search(rf"job {over}: time limit 2 -> 3 min by a step", site.b.log.read_text())
            and re.search(late.format(done), site.a.log.read_text())
        ),
        b_due_again,
        site,
    )
    assert cluster.scontrol_show_job(done)["TimeLimit"] == "00:02:00"
    site.b.kill()
    killed_after = time.monotonic() - done_at

    ends = {job: cluster.wait_state(job, timeout=300) for job in (over, done)}
    fields = ["JobIDRaw", "ElapsedRaw", "TimelimitRaw"]
    rows = {int(r["JobIDRaw"]): r for r in cluster.sacct_rows([over, done], fields, allocations_only=True)}
    a_log, b_log = site.logs()
    context = f"{rows}\nA:\n{a_log[-4000:]}\nB:\n{b_log[-4000:]}"
    # (1) + (3): COMPLETED, never killed before its user's own limit, extended by A alone after B died.
    assert ends[done] == "COMPLETED", context
    assert int(rows[done]["ElapsedRaw"]) >= 150 and 2 < int(rows[done]["TimelimitRaw"]) <= 5, context
    assert re.search(rf"job {done}: time limit 1 -> 3 min by the site's ended jobs", a_log), context
    assert re.search(rf"job {done}: time limit 1 -> 2 min by a step", b_log), context
    # A's extensions of it, from the limit each started at: its own 1 -> 3, then from B's 2, where
    # the job would have been killed had A taken B's extension for a lowering.
    extended_from = re.findall(rf"job {done}: time limit (\d+) -> \d+ min", a_log)
    assert extended_from[:2] == ["1", "2"], context
    assert len(re.findall(rf"job {done}: time limit", b_log)) == 1, context  # B died before it was due
    assert killed_after < 2 * 60 - LEAD_B_S, killed_after
    # (2): extended to its own limit by both guards (A's and B's last extension), never past it, and
    # stopped there by Slurm, never later.
    assert ends[over] == "TIMEOUT" and rows[over]["TimelimitRaw"] == "3", context
    assert 3 * 60 <= int(rows[over]["ElapsedRaw"]) <= 3 * 60 + KILL_SLACK_S, context
    assert re.search(rf"job {over}: time limit 1 -> 3 min by the site's ended jobs", a_log), context
    assert re.search(rf"job {over}: time limit 1 -> 2 min by a step", b_log), context
    assert re.search(late.format(over), a_log), context
    assert re.search(rf"job {over}: time limit 2 -> 3 min by the site's ended jobs", a_log), context
    # (4): no guard took the other's extension for its user's lowering.
    for job in (over, done):
        for log in (a_log, b_log):
            assert not re.search(rf"job {job}: limit lowered", log), context
