"""An account holding a terminal escape, on a real slurmctld that does not enforce associations
(the e2e clusters set no AccountingStorageEnforce): Slurm keeps it as given for a user without
associations, and `harp explain` shows it escaped (commands/terminal.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.e2e.cluster import SlurmCluster, StartCluster

ACCOUNT = "acct\x1b]0;pwned\x07x"  # OSC 0 ... BEL: sets an xterm's title
SHOWN = "acct\\x1b]0;pwned\\x07x"


def submit(cluster: SlurmCluster, *user: str) -> int:
    argv = ["sbatch", "--parsable", "-H", "-o", "/dev/null", "-t", "5", f"--account={ACCOUNT}"]
    done = cluster.run([*user, *argv], input="#!/bin/sh\ntrue\n", cwd="/tmp")
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def accounted(cluster: SlurmCluster, job_id: int) -> str:
    """The job's account in accounting (sacct), once its row is there."""
    deadline = time.monotonic() + 30
    while not (rows := cluster.sacct_rows([job_id], ["JobIDRaw", "Account"], allocations_only=True)):
        assert time.monotonic() < deadline, f"job {job_id} not in accounting"
        time.sleep(0.3)
    return rows[0]["Account"]


def test_an_account_holding_an_escape_is_kept_and_explained_escaped(
    start_cluster: StartCluster, tmp_path: Path
) -> None:
    cluster = start_cluster(public=True)
    users = submit(cluster, "runuser", "-u", "nobody", "--")  # no association: taken as given
    assert cluster.scontrol_show_job(users)["Account"] == ACCOUNT
    assert accounted(cluster, users) == ACCOUNT
    # Root has associations: slurmctld puts its default account instead (logging the one asked).
    roots = submit(cluster)
    assert cluster.scontrol_show_job(roots)["Account"] == "research"
    assert (
        f"account '{ACCOUNT}' has no association for user 0 using default account" in cluster.slurmctld_log()
    )

    config = tmp_path / "harp.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "store"}"\n')
    env = cluster.env | {"PATH": f"{cluster.env['PATH']}:{os.path.dirname(sys.executable)}"}
    argv = [sys.executable, "-m", "slurm_harp.cli", "explain", str(users), "--config", str(config)]
    done = cluster.run(argv, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job {users}: user nobody, partition batch, account {SHOWN};" in done.stdout
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    cluster.run(["scancel", str(users), str(roots)])
