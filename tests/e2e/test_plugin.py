"""The whole path on a real cluster: sbatch -> slurmctld -> job_submit.lua -> gRPC -> harp serve -> Decision.

One cluster runs our plugin for the whole module; the daemon beside it is a real `harp serve` process.
Policy: partition "debug" is in rewrite mode, everything else in shadow mode.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.cluster import SbatchResult, SlurmCluster, StartCluster
from tests.e2e.cluster_config import ACCOUNTS, DEFAULT_ACCOUNT
from tests.e2e.daemon_process import (
    DaemonProcess,
    GarbageGrpcServer,
    GarbageSocketServer,
    plugin_config,
    plugin_deadline,
)
from tests.integration.lua_driver import PLUGIN_ROOMY_MS

pytestmark = pytest.mark.alone  # times itself against the wall clock (scripts/test)

DEADLINE_MS = 50  # the production deadline, for the test about it; the others at PLUGIN_ROOMY_MS
RULES = '[[policy.rule]]\npartition = "debug"\nmode = "rewrite"\n[policy.floor]\ntime_minutes = 1\n'
# The KTH model's calibrated rule keeps a one-core request (the saving does not pay for its risk), and
# this cluster has too few cores to submit a big job: the plugin tests serve the plain 0.9 quantile.
# The model trained on the cluster's own jobs is served with its calibrated rule (the default).
POLICY = 'limits = "quantile"\n' + RULES
SHORT_MAX_MINUTES = 2 * 24 * 60  # partition "short"'s MaxTime, above the 3-day job's prediction
FAILED_AFTER = re.compile(r"daemon (?:call failed|still unavailable) after ([\d.]+) ms")
TAG = re.compile(r"harp:(\w+),(\S+)")


class Site:
    """The cluster with our plugin, the daemon, and the paths the plugin was configured with."""

    def __init__(self, cluster: SlurmCluster, daemon: DaemonProcess, work: Path) -> None:
        self.cluster = cluster
        self.daemon = daemon
        self.work = work
        self.disable_file = work / "harp.disable"

    def submit(self, *args: str, body: str = "sleep 1", hold: bool = False) -> SbatchResult:
        script = "#!/bin/sh\n" + "".join(f"#SBATCH {a}\n" for a in args) + body + "\n"
        result = self.cluster.sbatch(["-H"] if hold else [], script)
        assert result.returncode == 0 and result.job_id is not None, result.stderr
        return result

    def job(self, job_id: int) -> dict[str, str]:
        return self.cluster.scontrol_show_job(job_id)

    def cancel(self, *job_ids: int) -> None:
        self.cluster.run(["scancel", *map(str, job_ids)])

    def breaker_reset(self) -> None:
        time.sleep(1.2)  # breaker_seconds = 1 in this module


@pytest.fixture(scope="module")
def site(
    start_module_cluster: StartCluster, trained_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    work = Path(os.environ.get("HARP_E2E_DIR") or tmp_path_factory.mktemp("site"))
    store = work / "store"
    shutil.copytree(trained_store, store)
    plugin_conf = plugin_config(work, deadline_ms=PLUGIN_ROOMY_MS, breaker_seconds=1)
    cluster = start_module_cluster(
        job_submit_lua=(REPO / "plugin" / "job_submit.lua").read_text(),
        extra_conf_files={"harp_plugin.lua": plugin_conf},
        nodes=4,  # virtual nodes: more jobs at once for the train-on-own-jobs case
        public=True,  # an ordinary user submits too
        slurm_conf_extra=f"PartitionName=short Nodes=ALL MaxTime={SHORT_MAX_MINUTES} State=UP\n",
    )
    daemon = DaemonProcess(work, store, mode="shadow", extra=POLICY)
    daemon.start()
    try:
        yield Site(cluster, daemon, work)
    finally:
        daemon.stop()


def tag_of(site: Site, job_id: int) -> str:
    return site.job(job_id).get("AdminComment", "")


def test_shadow_annotates_and_leaves_the_job_unchanged(site: Site) -> None:
    result = site.submit("-t 120", "-J shadowed")
    assert result.job_id is not None
    assert "harp:" not in result.stderr + result.stdout  # nothing is said when nothing changed
    site.cluster.wait_state(result.job_id, {"COMPLETED"})
    row = site.cluster.sacct_rows(
        [result.job_id], ["JobIDRaw", "TimelimitRaw", "AdminComment"], allocations_only=True
    )
    assert row[0]["TimelimitRaw"] == "120"
    match = TAG.search(row[0]["AdminComment"])
    assert match and match.group(1) == "shadow", row
    assert re.search(r"\bt=\d+(?:/q[\d.]+)?,", match.group(2))  # a quantile only when the model has no rule
    assert re.search(r"\bv=\d{8}T\d{6}", match.group(2))


def test_rewrite_lowers_the_time_limit_and_tells_the_user(site: Site) -> None:
    result = site.submit("-t 3-00:00:00", "-p debug", "-J rewritten", hold=True)
    assert result.job_id is not None
    job = site.job(result.job_id)
    match = re.search(r"\bt!=(\d+)(?:/q[\d.]+)?,", job["AdminComment"])
    assert match, job["AdminComment"]
    minutes = int(match.group(1))
    assert 1 <= minutes < 3 * 24 * 60
    h, m = divmod(minutes, 60)
    d, h = divmod(h, 24)
    expected = (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:00"
    assert job["TimeLimit"] == expected
    assert "harp: lowered time from 3-00:00:00 to " + expected in result.stderr
    site.cancel(result.job_id)


def _failure_round(site: Site, label: str) -> list[SbatchResult]:
    results = [site.submit("-t 120", f"-J {label}", hold=True) for _ in range(5)]
    for r in results:
        assert r.job_id is not None
        job = site.job(r.job_id)
        assert job["TimeLimit"] == "02:00:00", (label, job)
        assert "harp:" not in job.get("AdminComment", ""), (label, job)
    site.cancel(*(r.job_id for r in results if r.job_id is not None))
    return results


def test_every_failure_mode_fails_open_within_the_deadline(site: Site) -> None:
    healthy = [site.submit("-t 120", "-J baseline", hold=True) for _ in range(10)]
    site.cancel(*(r.job_id for r in healthy if r.job_id is not None))
    baseline = statistics.median(r.wall_seconds for r in healthy)
    log_start = len(site.cluster.slurmctld_log())
    rounds: dict[str, list[SbatchResult]] = {}

    with plugin_deadline(site.cluster, site.work, DEADLINE_MS, breaker_seconds=1):
        site.breaker_reset()
        site.daemon.signal(signal.SIGSTOP)  # hung: accepts connections, never answers
        try:
            rounds["hung"] = _failure_round(site, "hung")
        finally:
            site.daemon.signal(signal.SIGCONT)
        site.breaker_reset()
        site.daemon.stop()  # stopped: the socket is removed
        rounds["socket missing"] = _failure_round(site, "nosocket")
        site.breaker_reset()
        site.daemon.socket.write_text("")  # a plain file where the socket should be
        rounds["not a socket"] = _failure_round(site, "notsocket")
        site.daemon.socket.unlink()
        site.breaker_reset()
        with GarbageGrpcServer(site.daemon.socket):
            rounds["garbage reply"] = _failure_round(site, "garbage")
        site.daemon.socket.unlink(missing_ok=True)
        site.breaker_reset()
        with GarbageSocketServer(site.daemon.socket):
            rounds["not gRPC"] = _failure_round(site, "notgrpc")
        site.daemon.socket.unlink(missing_ok=True)
        site.daemon.start()
    site.breaker_reset()

    failures = [float(ms) for ms in FAILED_AFTER.findall(site.cluster.slurmctld_log()[log_start:])]
    assert len(failures) >= len(rounds), "each failure mode must be logged by the plugin"
    assert max(failures) <= DEADLINE_MS + 5, failures
    slowest = max(r.wall_seconds for results in rounds.values() for r in results)
    # sbatch itself varies by tens of ms on a busy 2-core runner; the plugin's own figure is checked above.
    assert slowest <= baseline + DEADLINE_MS / 1000 + 0.25, (baseline, slowest)
    # Healthy again: the next submission is annotated.
    back = site.submit("-t 120", "-J recovered", hold=True)
    assert back.job_id is not None and "harp:shadow" in tag_of(site, back.job_id)
    site.cancel(back.job_id)


def test_disable_file_turns_the_plugin_into_a_pass_through(site: Site) -> None:
    site.disable_file.write_text("")
    try:
        r = site.submit("-t 3-00:00:00", "-p debug", hold=True)
        assert r.job_id is not None
        job = site.job(r.job_id)
        assert job["TimeLimit"] == "3-00:00:00" and "harp:" not in job.get("AdminComment", "")
        site.cancel(r.job_id)
    finally:
        site.disable_file.unlink()
    r = site.submit("-t 3-00:00:00", "-p debug", hold=True)
    assert r.job_id is not None and "harp:rewrite" in tag_of(site, r.job_id)
    site.cancel(r.job_id)


def test_a_fifo_as_the_disable_file_disables_without_blocking_slurmctld(site: Site) -> None:
    os.mkfifo(site.disable_file)  # open() of it for reading waits for a writer, in slurmctld's locks
    try:
        r = site.cluster.sbatch(["-H"], "#!/bin/sh\n#SBATCH -t 3-00:00:00\n#SBATCH -p debug\nsleep 1\n")
        assert r.returncode == 0 and r.job_id is not None, r.stderr
        assert r.wall_seconds < 5, f"sbatch took {r.wall_seconds:.1f} s"
        job = site.job(r.job_id)
        assert job["TimeLimit"] == "3-00:00:00" and "harp:" not in job.get("AdminComment", "")
        site.cancel(r.job_id)
    finally:
        with contextlib.suppress(OSError):  # a reader waiting on it (a regression): let it go
            os.close(os.open(site.disable_file, os.O_WRONLY | os.O_NONBLOCK))
        site.disable_file.unlink()


def _default_partition(site: Site) -> str:
    listing = site.cluster.run(["sinfo", "-h", "-o", "%P"])
    assert listing.returncode == 0, listing.stderr
    defaults = [name[:-1] for name in listing.stdout.split() if name.endswith("*")]
    assert len(defaults) == 1, listing.stdout
    return defaults[0]


def _reconfigure(site: Site, text: str) -> None:
    """Rewrite the daemon's config file and SIGHUP it; returns once the new policy is in force."""
    done = "reload: configuration re-read"
    before = site.daemon.log.read_text().count(done)
    site.daemon.config.write_text(text)
    site.daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while site.daemon.log.read_text().count(done) <= before:
        assert time.monotonic() < deadline, site.daemon.log.read_text()[-2000:]
        time.sleep(0.1)


@contextlib.contextmanager
def _rewrite_rule(site: Site, key: str, value: str) -> Iterator[None]:
    """The daemon's policy with one more rule, ``key = value`` in rewrite mode, for the block."""
    saved = site.daemon.config.read_text()
    _reconfigure(site, saved + f'[[policy.rule]]\n{key} = "{value}"\nmode = "rewrite"\n')
    try:
        yield
    finally:
        _reconfigure(site, saved)


def _default_reaches_the_daemon(site: Site, key: str, default: str, shown_as: str) -> list[int]:
    """A job submitted without ``key`` gets the shadow default; under a rule for ``key = default``
    it is rewritten, so the plugin sent the default that Slurm filled in (scontrol's ``shown_as``).
    Returns the job ids, to cancel."""
    before = site.submit("-t 3-00:00:00", f"-J no{key}", hold=True)
    assert before.job_id is not None and "harp:shadow" in tag_of(site, before.job_id)
    with _rewrite_rule(site, key, default):
        after = site.submit("-t 3-00:00:00", f"-J no{key}", hold=True)
        assert after.job_id is not None
        job = site.job(after.job_id)
        assert job[shown_as] == default, job  # Slurm filled in the default itself
        assert "harp:rewrite" in job["AdminComment"], job["AdminComment"]
    return [before.job_id, after.job_id]


def test_a_job_without_partition_reaches_the_daemon_with_the_default_partition(site: Site) -> None:
    """Accounting (what training learns from) records the default partition of a job submitted without
    -p: the plugin must send the daemon that name too, not nothing. Seen through a policy rule for the
    default partition, which only a request carrying that name can match."""
    default = _default_partition(site)
    assert default != "debug"  # "debug" already has a rule; other partitions get the shadow default
    site.cancel(*_default_reaches_the_daemon(site, "partition", default, "Partition"))


def test_a_job_without_account_reaches_the_daemon_with_the_default_account(site: Site) -> None:
    """As for the partition: accounting records the user's default account for a job submitted
    without -A, and a rule for that account must match it; a job that names another does not."""
    jobs = _default_reaches_the_daemon(site, "account", DEFAULT_ACCOUNT, "Account")
    other = next(a for a in ACCOUNTS if a != DEFAULT_ACCOUNT)
    with _rewrite_rule(site, "account", DEFAULT_ACCOUNT):
        given = site.submit("-t 3-00:00:00", f"-A {other}", hold=True)
        assert given.job_id is not None and "harp:shadow" in tag_of(site, given.job_id)
    site.cancel(*jobs, given.job_id)


def _predicted_minutes(site: Site, job_id: int) -> str | None:
    """The t= value of the job's harp tag (shadow mode: the prediction), or None."""
    match = TAG.search(tag_of(site, job_id))
    items = match[2].split(",") if match else []
    return next((item[2:].split("/")[0] for item in items if item.startswith("t=")), None)


def test_a_job_without_a_time_limit_is_predicted_with_its_partition_s_default(site: Site) -> None:
    """Without --time slurmctld gives the job its partition's limit after job_submit.lua (short has no
    DefaultTime: its MaxTime, 2 days), and accounting records that limit, which training learns from.
    The plugin sends it beside the missing limit, so the daemon predicts as for the same job asking 2
    days. Before, the limit was unknown at serving: the KTH model predicted about a minute at q0.9
    for such a job, and about 1,500 minutes with the limit it gets."""
    for _ in range(3):  # the two submissions within one hour of the day (a feature)
        hour = time.gmtime().tm_hour
        without = site.submit("-p short", "-J nolimit", hold=True)
        given = site.submit("-p short", f"-t {SHORT_MAX_MINUTES}", "-J nolimit", hold=True)
        jobs = [j.job_id for j in (without, given) if j.job_id is not None]
        if time.gmtime().tm_hour == hour:
            break
        site.cancel(*jobs)
    try:
        tags = [tag_of(site, job_id) for job_id in jobs]
        predicted = [_predicted_minutes(site, job_id) for job_id in jobs]
        assert predicted[0] is not None and predicted[0] == predicted[1], tags
        # Policy still sees no limit of the user's: the job keeps the default Slurm gives it.
        assert "harp: lowered" not in without.stderr
    finally:
        site.cancel(*jobs)


def test_corrupt_model_on_reload_keeps_the_old_model(site: Site) -> None:
    from slurm_harp.core.request import Target
    from slurm_harp.model.store import ModelStore

    store = ModelStore(site.daemon.store)
    current = store.current_dir(Target.TIME)
    assert current is not None
    before = site.submit("-t 120", hold=True)
    assert before.job_id is not None
    old_tag = tag_of(site, before.job_id)
    assert f"v={current.name}" in old_tag
    bad = current.with_name("20991231T235959.000000Z")  # a later, well-formed version name
    shutil.copytree(current, bad)
    for f in bad.glob("*.onnx"):
        f.write_bytes(b"\x08\x07not an onnx model" + f.read_bytes()[64:])
    store.set_current(Target.TIME, bad.name)
    try:
        site.daemon.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "rejected model" not in site.daemon.log.read_text():
            assert time.monotonic() < deadline, site.daemon.log.read_text()[-2000:]
            time.sleep(0.1)
        after = site.submit("-t 120", hold=True)
        assert after.job_id is not None
        assert f"v={current.name}" in tag_of(site, after.job_id)
        site.cancel(before.job_id, after.job_id)
    finally:
        store.set_current(Target.TIME, current.name)


def test_train_on_the_clusters_own_jobs_then_predict(site: Site) -> None:
    # Training needs 50 jobs that ENDED before the validation window opens, and 10 to validate: two waves.
    for wave in (52, 14):
        jobs = [site.submit("-t 60", "-J sleepy", body="sleep 2") for _ in range(wave)]
        for j in jobs:
            assert j.job_id is not None
            site.cluster.wait_state(j.job_id, {"COMPLETED"}, timeout=180)
    own_store = site.work / "own-store"
    # The production path: harp nightly harvests the real sacct into a job store, trains every
    # target it can and promotes (no champion yet). Its 13 or more validation jobs can show a
    # budget of 30 % met (10 jobs), not the default 1 % (300: calibration.jobs_needed), under which
    # the rule would never rewrite.
    nightly_conf = site.work / "nightly.toml"
    nightly_conf.write_text(
        f'[store]\npath = "{own_store}"\n[history]\ndb = "{site.work / "jobs.sqlite"}"\n'
        "[training]\nkill_budget = 0.3\n"
    )
    train = subprocess.run(
        [
            sys.executable,
            "-m",
            "slurm_harp.cli",
            "nightly",
            "--config",
            str(nightly_conf),
            "--settle-seconds",
            "0",
        ],
        env=site.cluster.env | {"PATH": site.cluster.env["PATH"] + ":" + os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert train.returncode == 0, train.stderr
    assert "harvest sacct:" in train.stdout and "promoted: no champion" in train.stdout, train.stdout
    site.daemon.store = own_store
    site.daemon.write_config("shadow", RULES)
    site.daemon.signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        probe = site.submit("-t 60", "-J sleepy", "-p debug", body="sleep 2")
        assert probe.job_id is not None
        tag = tag_of(site, probe.job_id)
        if _served_from(site, own_store, tag):
            break
        assert time.monotonic() < deadline, tag
        site.cancel(probe.job_id)
        time.sleep(0.2)
    job = site.job(probe.job_id)
    # The jobs took ~2 s: the model's upper quantile is well under a minute, so the floor (1 min) applies.
    assert job["TimeLimit"] == "00:01:00", job
    assert "harp: lowered time from 01:00:00 to 00:01:00" in probe.stderr
    assert site.cluster.wait_state(probe.job_id, {"COMPLETED"}, timeout=120) == "COMPLETED"


def _served_from(site: Site, store: Path, tag: str) -> bool:
    from slurm_harp.core.request import Target
    from slurm_harp.model.store import ModelStore

    current = ModelStore(store).current_dir(Target.TIME)
    return current is not None and f"v={current.name}" in tag


def test_an_ordinary_user_is_served_and_cannot_forge_the_tag(site: Site) -> None:
    """Jobs of a non-root user get the tag from the plugin; the user cannot write AdminComment."""
    script = "#!/bin/sh\n#SBATCH -t 120\n#SBATCH -H\n#SBATCH --chdir=/tmp\n#SBATCH -o /dev/null\nsleep 1\n"
    submit = site.cluster.run(
        ["runuser", "-u", "nobody", "--", "sbatch", "--parsable"], input=script, cwd="/tmp"
    )
    assert submit.returncode == 0, submit.stderr
    job_id = int(submit.stdout.strip().split(";")[0])
    job = site.job(job_id)
    assert job["UserId"].startswith("nobody") and "harp:shadow" in job["AdminComment"]
    forged = "harp:rewrite,t!=1/q0.9,v=forged"
    update = site.cluster.run(
        ["runuser", "-u", "nobody", "--", "scontrol", "update", f"JobId={job_id}", f"AdminComment={forged}"],
        cwd="/tmp",
    )
    assert update.returncode != 0
    assert site.job(job_id)["AdminComment"] == job["AdminComment"]
    site.cancel(job_id)


def test_a_limit_above_the_partition_s_maxtime_is_not_cut_into_one_that_runs(site: Site) -> None:
    """Slurm checks the limit job_submit.lua leaves against MaxTime: a job asking more waits
    (PartitionTimeLimit) or is refused. Cut below MaxTime, it ran, and was stopped there, before
    its user's own limit. The plugin leaves such a limit as asked, and Slurm decides as without harp."""
    with _rewrite_rule(site, "partition", "short"):
        result = site.submit("-t 3-00:00:00", "-p short", "-J overmax")
    assert result.job_id is not None
    try:
        job = site.job(result.job_id)
        assert job["TimeLimit"] == "3-00:00:00", job
        assert "harp:rewrite," in job["AdminComment"] and "t!=" not in job["AdminComment"], job
        assert "harp: lowered" not in result.stderr
        deadline = time.monotonic() + 20
        while site.job(result.job_id).get("Reason") != "PartitionTimeLimit":
            assert time.monotonic() < deadline, site.job(result.job_id)
            time.sleep(0.2)
        assert site.job(result.job_id)["JobState"] == "PENDING"
    finally:
        site.cancel(result.job_id)
