"""`harp advise` on a real cluster: a user ran one job name at two sizes (1 CPU for 20 s, 2 CPUs for 6
s), `harp harvest` read them from real sacct, and `harp advise` through a running `harp serve`'s
advice socket names the 2-CPU run as the cheaper, its run time and price checked against what
accounting says. Another user ran the same job name too: neither sees the other's run."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from tests.e2e.advice_site import advice_daemon, open_site, submit_two_sizes
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.harvesting import settled
from tests.integration.as_user import channel_as

NAME = "advise-me"
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def site(start_cluster: StartCluster) -> Iterator[tuple[SlurmCluster, Path]]:
    yield from open_site(start_cluster)


def submit_as_nobody(cluster: SlurmCluster, args: list[str], script: str) -> int:
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "sbatch", "--parsable", "-o", "/dev/null", *args],
        input=script, capture_output=True, text=True, cwd="/tmp", env=cluster.env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def harp_advise(cluster: SlurmCluster, *args: str) -> str:
    bin_dir = os.path.dirname(sys.executable)
    env = cluster.env | {"PATH": f"{cluster.env['PATH']}:/usr/bin:{bin_dir}"}
    argv = [sys.executable, "-m", "slurm_harp.cli", "advise", *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_user_gets_the_cheaper_of_the_two_sizes_they_ran(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    started = time.monotonic()
    one, two = submit_two_sizes(cluster, NAME)  # 1 CPU for 20 s, 2 CPUs for 6 s
    theirs = submit_as_nobody(cluster, ["-J", NAME, "-n", "1", "-t", "5"], "#!/bin/sh\nsleep 1\n")
    rows = {job: settled(cluster, job)[0] for job in (one, two, theirs)}
    assert all(r["State"] == "COMPLETED" for r in rows.values()), rows

    daemon = advice_daemon(cluster, work)
    daemon.start()
    try:
        socket = str(work / "advice.sock")
        print(harp_advise(cluster, "--socket", socket, "--name", NAME))  # shown with -s
        answer: dict[str, Any] = json.loads(
            harp_advise(cluster, "--socket", socket, "--name", NAME, "--json")
        )
        with channel_as(NOBODY.pw_uid, work / "advice.sock") as channel:
            request = pb.AdviceRequest(job=pb.SubmitRequest(job_name=NAME, user_name="root", user_id=0))
            nobody: pb.Advice = pb_grpc.AdvisorStub(channel).Advise(request, timeout=30)
    finally:
        daemon.stop()
    print(f"e2e advise: {time.monotonic() - started:.0f} s after the first submission")

    assert answer["user_name"] == "root" and answer["job_name"] == NAME
    assert answer["evidence"] == "1 run at 1 CPU, 1 at 2 CPUs"  # nobody's 1-CPU run is not root's
    options = answer["options"]
    cheapest = options[answer["cheapest"]]
    assert cheapest["partition"] == "batch" and cheapest["cpus"] == 2 and cheapest["nodes"] == 1
    # Two sizes, one run each: the fit runs through both, so each option's expected run time is
    # what accounting measured, and its cost is CPUs x that time at 1 billed unit per CPU-hour.
    for job_id, cpus in ((one, 1), (two, 2)):
        option = next(o for o in options if o["partition"] == "batch" and o["cpus"] == cpus)
        minutes = int(rows[job_id]["ElapsedRaw"]) / 60
        assert option["expected_minutes"] == pytest.approx(minutes)
        assert option["expected_cost"] == pytest.approx(cpus * minutes / 60)
        assert (
            int(option["time_limit_minutes"]) == 1
        )  # 110 % of a run of seconds, in whole minutes (JSON: text)
    single = next(o for o in options if o["partition"] == "batch" and o["cpus"] == 1)
    assert single["expected_cost"] > cheapest["expected_cost"]
    four = next(o for o in options if o["partition"] == "batch" and o["cpus"] == 4)
    assert four["evidence"] == "no evidence" and not four.get("priced", False)
    # debug is batch's twin (same nodes, same price): its 2 CPUs tie, and batch, first by name, wins.
    assert answer["fastest"] == answer["cheapest"]
    assert {(options[i]["partition"], options[i]["cpus"]) for i in answer["pareto"]} == {
        ("batch", 2),
        ("debug", 2),
    }

    assert nobody.user_name == "nobody" and nobody.evidence == "1 run at 1 CPU"
    assert {o.cpus for o in nobody.options if o.priced} == {1}
