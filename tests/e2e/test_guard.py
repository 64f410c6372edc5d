"""Time_min and extend modes on a real cluster, with `harp guard` as a real process.

One test runs the scenarios side by side (each job that runs into a limit costs minutes here):
(a) an extend-mode job that runs longer than its cut limit is extended and COMPLETED: by the
    conditional extension, from a job store of ended jobs that the real `harp harvest` summarised;
(b) a job that runs longer than its own request is stopped at that request, never later;
(c) with the guard stopped, a new job is annotated, not shortened, and the user is told;
(d) the guard is killed while shortened jobs run and restarted: it catches up in time;
(e) time_min mode sets time_min and keeps the limit;
(f) a maintenance reservation right after a shortened job: the guard refuses, logs and counts it;
(g) a job opted out with --comment harp:off is untouched.
A second test, on a cluster that backfills every second: Slurm's backfill starts a time_min job
with its limit cut below its request, and the guard extends it so that it completes.
Policy: partition debug is in extend mode, account teaching (in batch) in time_min mode.
"""

from __future__ import annotations

import math
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.slurm_formats import parse_duration_s
from tests.conftest import REPO
from tests.e2e.cluster import SbatchResult, SlurmCluster, StartCluster
from tests.e2e.daemon_process import DaemonProcess, plugin_config
from tests.e2e.harvesting import harvest
from tests.integration.lua_driver import PLUGIN_ROOMY_MS

# Minutes of waiting on real jobs: scripts/test runs this module beside the others so marked.
pytestmark = pytest.mark.side_by_side

POLL_S, LEAD_S, STALE_S = 2, 40, 5
# slurmctld checks limits about every 30 s and waits KillWait (5 s) before the kill.
KILL_SLACK_S = 50
TAG = re.compile(r"harp:(\w+),(\S+)")
# The site's history: 30 jobs ran 2.5 times harp's value (in 40 log bins a decade, the quantile
# answers the bin's upper edge), so a job that outlives its cut limit is extended to 2.51 times it.
HISTORY_RATIO, HISTORY_EDGE = 2.5, 10 ** (16 / 40)


def seed_history(db: Path) -> None:
    """Ended jobs in shadow mode that ran HISTORY_RATIO times harp's 10 minutes."""
    now = int(time.time())
    jobs = [
        JobRecord(
            job_id=str(i),
            request=JobRequest(user_name="alice", time_limit_minutes=60, submit_time=now - 7200),
            state="COMPLETED",
            elapsed_s=round(HISTORY_RATIO * 600),
            end_time=now - 3600,
            harp_tag="harp:shadow,t=10,v=seed",
        )
        for i in range(30)
    ]
    with JobStore(db) as store:
        store.upsert(jobs, "seed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GuardProcess:
    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self.config, self.env, self.log = config, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "slurm_harp.cli", "guard", "--config", str(self.config)],
                stdout=out,
                stderr=out,
                env=self.env,
            )

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
            self.proc = None


def guard_cluster(
    start_cluster: StartCluster,
    trained_store: Path,
    work: Path,
    *,
    nodes: int,
    scheduler_parameters: str = "",
) -> tuple[SlurmCluster, Path, Path]:
    """A cluster running harp's plugin (a roomy deadline, a 1 s breaker), a copy of the trained
    store in ``work``, and a job store whose extension history the real harvest summarised:
    (cluster, store, job store)."""
    store = work / "store"
    shutil.copytree(trained_store, store)
    plugin_conf = plugin_config(work, deadline_ms=PLUGIN_ROOMY_MS, breaker_seconds=1)
    cluster = start_cluster(
        job_submit_lua=(REPO / "plugin" / "job_submit.lua").read_text(),
        extra_conf_files={"harp_plugin.lua": plugin_conf},
        nodes=nodes,
        scheduler_parameters=scheduler_parameters,
    )
    db = work / "jobs.sqlite"
    seed_history(db)
    assert ", 30 jobs in the extension history" in harvest(cluster, db)
    return cluster, store, db


@pytest.fixture
def site(
    request: pytest.FixtureRequest,
    start_cluster: StartCluster,
    trained_store: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SlurmCluster, DaemonProcess, GuardProcess, Path, int]]:
    """The site; a test parametrizes it (indirect) with more SchedulerParameters for its cluster."""
    work = tmp_path_factory.mktemp("guard")
    cluster, store, db = guard_cluster(
        start_cluster, trained_store, work, nodes=4, scheduler_parameters=getattr(request, "param", "")
    )
    port = _free_port()
    policy = (
        # The bundled KTH model's median cuts these short requests to the one-minute floor.
        'limits = "quantile"\nquantile = 0.5\n[policy.floor]\ntime_minutes = 1\n'
        '[[policy.rule]]\npartition = "debug"\nmode = "extend"\n'
        '[[policy.rule]]\naccount = "teaching"\nmode = "time_min"\n'
        f'[guard]\nheartbeat = "{work / "guard.heartbeat"}"\nstate = "{work / "limits.json"}"\n'
        f"poll_seconds = {POLL_S}\n"
        f"lead_seconds = {LEAD_S}\nstale_seconds = {STALE_S}\nmetrics_port = {port}\n"
    )
    daemon = DaemonProcess(work, store, mode="shadow", extra=policy)
    daemon.start()
    # The guard learns from the job store; the daemon is given none, so that the test user is not
    # a cold user (whose jobs the policy leaves alone) in a history that knows only "alice".
    guard_config = work / "guard.toml"
    guard_config.write_text(daemon.config.read_text() + f'[history]\ndb = "{db}"\n')
    guard = GuardProcess(guard_config, cluster.env, work / "guard.log")
    try:
        yield cluster, daemon, guard, work, port
    finally:
        guard.stop()
        daemon.stop()


def submit(cluster: SlurmCluster, *args: str, body: str) -> SbatchResult:
    script = "#!/bin/sh\n" + "".join(f"#SBATCH {a}\n" for a in args) + body + "\n"
    result = cluster.sbatch([], script)
    assert result.returncode == 0 and result.job_id is not None, result.stderr
    return result


def tag(cluster: SlurmCluster, job_id: int) -> tuple[str, dict[str, str]]:
    comment = cluster.scontrol_show_job(job_id).get("AdminComment", "")
    match = TAG.search(comment)
    assert match, comment
    items = dict(item.split("=", 1) for item in match.group(2).split(",") if "=" in item)
    return match.group(1), items


def wait_alive(heartbeat: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if heartbeat.exists() and time.time() - heartbeat.stat().st_mtime < STALE_S:
            return
        time.sleep(0.2)
    raise AssertionError("the guard never beat")


def metric(port: int, name: str, labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    selector = rf"\{{{labels}\}}" if labels else ""
    match = re.search(rf"^{name}{selector} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_time_min_and_extend_modes_never_kill_before_the_own_limit(
    site: tuple[SlurmCluster, DaemonProcess, GuardProcess, Path, int],
) -> None:
    cluster, _daemon, guard, work, port = site
    heartbeat = work / "guard.heartbeat"
    guard.start()
    wait_alive(heartbeat)

    a = submit(cluster, "-p debug", "-t 5", "-J a-extend", body="sleep 150")
    b = submit(cluster, "-p debug", "-t 3", "-J b-overrun", body="sleep 600")
    e = submit(cluster, "-p batch", "-A teaching", "-t 5", "-J e-timemin", body="sleep 5")
    g = submit(cluster, "-p debug", "-t 5", "-J g-optout", "--comment=harp:off", body="sleep 5")
    f = submit(cluster, "-p debug", "-t 5", "-J f-refused", "-w c4", body="sleep 150")
    assert a.job_id and b.job_id and e.job_id and g.job_id and f.job_id
    submitted = time.monotonic()

    # (a) cut to a short limit, the user told, the request recorded on the job itself.
    mode, items = tag(cluster, a.job_id)
    assert mode == "extend" and items.get("t0") == "5", (mode, items)
    cut = int(items["t!"].split("/")[0])
    assert cut * 60 < 150, f"the model no longer cuts this job below its run ({cut} min): pick another"
    assert cluster.scontrol_show_job(a.job_id)["TimeLimit"] == f"00:{cut:02d}:00"
    assert "extended up to 00:05:00" in a.stderr + a.stdout
    # (e) time_min set, the limit kept.
    job_e = cluster.scontrol_show_job(e.job_id)
    assert job_e["TimeLimit"] == "00:05:00" and job_e["TimeMin"] != "N/A", job_e
    assert tag(cluster, e.job_id)[0] == "time_min" and "time_min set to" in e.stderr + e.stdout
    # (g) opted out: untouched, no tag, nothing said.
    job_g = cluster.scontrol_show_job(g.job_id)
    assert job_g["TimeLimit"] == "00:05:00" and "harp:" not in job_g.get("AdminComment", "")
    assert "harp" not in g.stderr + g.stdout

    # (f) a maintenance reservation on its node right after its cut limit.
    cluster.wait_state(f.job_id, {"RUNNING"}, timeout=30)
    made = cluster.run(
        [
            "scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now+70",
            "Duration=10", "Nodes=c4", "Users=root", "Flags=maint,ignore_jobs",
        ]
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    # (c) + (d): the guard dies; once its heartbeat is stale new jobs are only annotated.
    guard.kill()
    time.sleep(STALE_S + 1)
    c = submit(cluster, "-p debug", "-t 5", "-J c-guard-down", body="sleep 1")
    assert c.job_id is not None
    assert cluster.scontrol_show_job(c.job_id)["TimeLimit"] == "00:05:00"
    assert tag(cluster, c.job_id)[0] == "shadow"
    assert "guard is not running" in c.stderr + c.stdout
    # The shortened jobs fall due (less than the lead left) while the guard is down; it comes
    # back before their limits and catches up on its first poll.
    time.sleep(max(0.0, submitted + cut * 60 - LEAD_S + 8 - time.monotonic()))
    assert time.monotonic() - submitted < cut * 60 - 15, "too slow to test the catch-up in time"
    guard.start()

    ends = {j: cluster.wait_state(j, timeout=600) for j in (a.job_id, b.job_id, f.job_id)}
    rows = {
        int(r["JobIDRaw"]): r
        for r in cluster.sacct_rows(
            [a.job_id, b.job_id, f.job_id],
            ["JobIDRaw", "State", "ElapsedRaw", "TimelimitRaw"],
            allocations_only=True,
        )
    }
    # (a)/(d): extended, up to the request, and COMPLETED.
    assert ends[a.job_id] == "COMPLETED", rows[a.job_id]
    assert rows[a.job_id]["TimelimitRaw"] == "5"
    # (b): stopped at its own limit, never later.
    assert ends[b.job_id] == "TIMEOUT", rows[b.job_id]
    assert rows[b.job_id]["TimelimitRaw"] == "3"
    assert 3 * 60 <= int(rows[b.job_id]["ElapsedRaw"]) <= 3 * 60 + KILL_SLACK_S
    # (f): refused at the reservation, logged and counted; the site's maintenance wins.
    assert rows[f.job_id]["TimelimitRaw"] == str(cut)
    log = (work / "guard.log").read_text()
    assert re.search(rf"job {f.job_id}: not extended past {cut} min \(reservation maint\)", log), log[-3000:]
    assert metric(port, "harp_guard_extensions_total", 'result="refused_bound"') >= 1
    assert metric(port, "harp_guard_extensions_total", 'result="reached_request"') >= 2
    # (a): the first extension went where the site's ended jobs say (a step would give cut + 1);
    # (d): it was due while the guard was down.
    learned = min(5, math.ceil(cut * HISTORY_EDGE))
    extended = rf"job {a.job_id}: time limit {cut} -> {learned} min by the site's ended jobs"
    caught_up = re.search(extended + r" \(own 5, (\d+) s were left\)", log)
    assert caught_up and int(caught_up.group(1)) < LEAD_S, log[-3000:]
    assert metric(port, "harp_guard_extension_history_jobs", "") == 30


# Backfill every second (default 30 s) on a 5 s grid (default 60 s): a window is seen at once.
BACKFILL = "bf_interval=1,bf_resolution=5"


@pytest.mark.parametrize("site", [BACKFILL], indirect=True, ids=["backfill"])
def test_a_time_min_job_backfilled_with_a_cut_limit_is_extended_and_completes(
    site: tuple[SlurmCluster, DaemonProcess, GuardProcess, Path, int],
) -> None:
    """Time_min mode's promise: Slurm's backfill starts a job early with its limit cut toward its
    time_min, the job runs past that cut, and the guard extends it so that it completes. Beside it,
    an opted-out job with the same --time-min, which no guard extends, is killed at its cut."""
    cluster, _daemon, guard, work, _port = site
    guard.start()
    wait_alive(work / "guard.heartbeat")
    off = "--comment=harp:off"
    # A blocker on half the nodes (limit 2 min) and, behind it, a job of higher priority that needs
    # every node: backfill reserves them all for it from the blocker's limit on, which leaves the
    # other half a window of under 2 min.
    blocker = submit(cluster, "-p batch", "-N 2", "--exclusive", "-t 2", "-J blocker", off, body="sleep 600")
    assert blocker.job_id
    cluster.wait_state(blocker.job_id, {"RUNNING"}, timeout=30)
    wide = submit(cluster, "-p batch", "-N 4", "--exclusive", "-t 5", "-J wide", off, body="sleep 1")
    # Runs 100 s: past a one-minute cut, and past where slurmctld killed at one here (80-90 s).
    job = submit(cluster, "-p batch", "-A teaching", "-t 5", "-J timemin", body="sleep 100")
    bare = submit(cluster, "-p batch", "-t 5", "--time-min=1", "-J bare", off, body="sleep 300")
    assert wide.job_id and job.job_id and bare.job_id
    mode, items = tag(cluster, job.job_id)
    assert mode == "time_min" and items.get("t0") == "5", (mode, items)
    time_min = int(items["t~"].split("/")[0])

    for j in (job.job_id, bare.job_id):
        cluster.wait_state(j, {"RUNNING"}, timeout=60)
    started = cluster.scontrol_show_job(job.job_id)
    assert cluster.scontrol_show_job(wide.job_id)["JobState"] == "PENDING"
    # Backfill started it with a limit cut below the user's request, no lower than its time_min.
    assert started["Scheduler"] == "Backfill" and started["TimeMin"] == f"00:{time_min:02d}:00", started
    cut = int(parse_duration_s(started["TimeLimit"]) or 0) // 60
    assert time_min <= cut < 5, started

    ends = {j: cluster.wait_state(j, timeout=300) for j in (job.job_id, bare.job_id)}
    fields = ["JobIDRaw", "State", "ElapsedRaw", "TimelimitRaw"]
    rows = {int(r["JobIDRaw"]): r for r in cluster.sacct_rows(ends, fields, allocations_only=True)}
    ran, final = int(rows[job.job_id]["ElapsedRaw"]), int(rows[job.job_id]["TimelimitRaw"])
    # Extended past its cut, never past the user's own limit, and it ran to its end.
    assert ends[job.job_id] == "COMPLETED" and ran >= 100 and cut < final <= 5, rows[job.job_id]
    log = (work / "guard.log").read_text()
    first = re.search(rf"job {job.job_id}: time limit {cut} -> (\d+) min .*\(own 5,", log)
    assert first and cut < int(first.group(1)) <= final, log[-3000:]
    # Without the guard: the same cut, kept, and the job killed at it.
    assert ends[bare.job_id] == "TIMEOUT" and rows[bare.job_id]["TimelimitRaw"] == str(cut), rows[bare.job_id]
    assert cut * 60 <= int(rows[bare.job_id]["ElapsedRaw"]) <= cut * 60 + KILL_SLACK_S, rows[bare.job_id]
