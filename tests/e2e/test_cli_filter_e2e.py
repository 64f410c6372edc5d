"""The cli_filter hook (plugin/cli_filter.lua) in a real sbatch against a real cluster.

root ran one job name at two sizes (1 CPU for 20 s, 2 CPUs for 6 s), `harp harvest` read them and
`harp serve` advises on its advice socket. A "login node" is a directory holding a copy of the
cluster's slurm.conf plus ``CliFilterPlugins=lua``, our cli_filter.lua and harp_advice.lua: sbatch
reads it through SLURM_CONF; slurmctld and the other tests keep the cluster's own configuration.

Shown: the line names the 2-CPU run with the run times and costs accounting gives, and the job is
submitted; HARP_ADVICE=0 silences it; a huge non-UTF-8 job name still submits (and the daemon still
answers); a hung daemon costs about the deadline, a stopped one nothing, and neither prints a line.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from tests.conftest import REPO
from tests.e2e.advice_site import advice_daemon, login_node, open_site, submit_two_sizes
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import settled
from tests.integration.as_user import channel_as

pytestmark = pytest.mark.alone  # times itself against the wall clock (scripts/test)

NAME = "advise-at-submit"
SCRIPT = b"#!/bin/sh\nsleep 1\n"
# The warm daemon answers in milliseconds; this leaves room for a loaded 2-core CI machine.
DEADLINE_MS = 1000
HUNG_DEADLINE_MS = 300
# A hung daemon may cost sbatch the deadline, never more: anything past this is a hang.
HUNG_EXTRA_S = 3.0


@pytest.fixture
def site(start_cluster: StartCluster) -> Iterator[tuple[SlurmCluster, Path]]:
    yield from open_site(start_cluster)


def harp_login_node(cluster: SlurmCluster, work: Path, deadline_ms: int) -> dict[str, str]:
    """sbatch's environment on a login node whose slurm.conf enables the hook (a copy in its own dir)."""
    conf = work / f"login-{deadline_ms}"
    env = login_node(cluster, conf, (REPO / "plugin" / "cli_filter.lua").read_text())
    (conf / "harp_advice.lua").write_text(
        f'return {{ enabled = true, lib_dir = "{REPO / "plugin"}", socket = "{work / "advice.sock"}", '
        f"deadline_ms = {deadline_ms} }}\n"
    )
    return env


def sbatch(cluster: SlurmCluster, env: dict[str, str], *args: str | bytes) -> tuple[int, list[str], float]:
    """Submit as root: the job id, sbatch's stderr lines starting "harp:", the wall time."""
    t0 = time.monotonic()
    done = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "-t", "5", *args],
        input=SCRIPT, capture_output=True, env=env, cwd=cluster.jobs_dir, timeout=60, check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr
    job_id = int(done.stdout.decode().strip().split(";")[0])
    return job_id, [line for line in stderr.splitlines() if line.startswith("harp:")], wall


def test_sbatch_prints_the_advice_and_never_blocks(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    one, two = submit_two_sizes(cluster, NAME)
    rows = {job: settled(cluster, job)[0] for job in (one, two)}
    assert all(r["State"] == "COMPLETED" for r in rows.values()), rows
    daemon = advice_daemon(cluster, work)
    daemon.start()
    try:
        # A daemon in service has read the partitions before; so does this one, and tells the currency.
        with channel_as(0, work / "advice.sock") as channel:
            request = pb.AdviceRequest(job=pb.SubmitRequest(job_name=NAME))
            currency = pb_grpc.AdvisorStub(channel).Advise(request, timeout=30).currency
        env = harp_login_node(cluster, work, DEADLINE_MS)
        log_before = len(cluster.slurmctld_log())

        job, lines, wall = sbatch(cluster, env, "-J", NAME, "-n", "1")
        print(f"sbatch with the advice line: {wall:.2f} s; {lines}")  # shown with -s
        # Each size's expected run time is the run accounting measured; costs are CPU-hours.
        s1, s2 = (int(rows[j]["ElapsedRaw"]) for j in (one, two))
        assert lines == [
            f"harp: 2 CPUs in batch would take ~{s2} s and cost ~{2 * s2 / 3600:.2g} {currency} "
            f"(you asked 1 CPU: ~{s1} s, ~{s1 / 3600:.2g} {currency}); harp advise for more"
        ]
        assert cluster.scontrol_show_job(job)["JobName"] == NAME

        job, lines, _ = sbatch(cluster, env | {"HARP_ADVICE": "0"}, "-J", NAME, "-n", "1")
        assert lines == [] and cluster.scontrol_show_job(job)["JobName"] == NAME

        _, lines, _ = sbatch(cluster, env, "-J", NAME, "-n", "2")  # asked the cheapest: nothing to say
        assert lines == []

        # ~1 kB of invalid UTF-8 as the name (slurmctld refuses names over 1024 bytes; harp sends 255):
        # sbatch submits it, and the daemon answers (no evidence for that name).
        hostile = b"\xff\xfe\xc0" * 333
        _, lines, _ = sbatch(cluster, env | {"HARP_ADVICE_DEBUG": "1"}, b"-J" + hostile, "-n", "1")
        assert len(lines) == 1 and re.match(r"harp: no advice \(\d+ options, none better", lines[0]), lines

        hung_env = harp_login_node(cluster, work, HUNG_DEADLINE_MS)
        _, _, silenced = sbatch(cluster, hung_env | {"HARP_ADVICE": "0"}, "-J", NAME, "-n", "1")
        # The advice is served by the daemon's child process: hung, it accepts connections (the
        # kernel's backlog) and never answers.
        (advice,) = daemon.advice_pids()
        os.kill(advice, signal.SIGSTOP)
        try:
            job, lines, wall = sbatch(cluster, hung_env | {"HARP_ADVICE_DEBUG": "1"}, "-J", NAME, "-n", "1")
        finally:
            os.kill(advice, signal.SIGCONT)
        print(f"sbatch with a hung daemon: {wall:.2f} s, silenced {silenced:.2f} s; {lines}")
        assert lines == ["harp: no advice (deadline exceeded)"], lines
        assert wall < silenced + HUNG_DEADLINE_MS / 1000 + HUNG_EXTRA_S
        assert cluster.scontrol_show_job(job)["JobName"] == NAME
    finally:
        daemon.stop()

    job, lines, _ = sbatch(cluster, env, "-J", NAME, "-n", "1")  # the daemon is gone
    assert lines == [] and cluster.scontrol_show_job(job)["JobName"] == NAME
    _, lines, _ = sbatch(cluster, env | {"HARP_ADVICE_DEBUG": "1"}, "-J", NAME, "-n", "1")
    assert len(lines) == 1 and "advice.sock" in lines[0], lines
    # slurmctld took every submission from the login node's slurm.conf without a complaint.
    assert "error" not in cluster.slurmctld_log()[log_before:].lower()
