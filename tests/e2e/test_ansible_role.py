"""The Ansible role (deploy/ansible) installs slurm-harp on this machine, beside a real test cluster,
and a submission then goes through what it installed.

ansible-playbook runs against localhost (connection local), every path pointed into the test's
directory and at the cluster's slurm.conf directory. systemd is not PID 1 here (CI), so the role is
told not to manage services: the installed units are checked with `systemd-analyze verify`, and the
test starts the installed daemon itself, from the installed virtualenv and configuration.
The daemon is installed from a wheel of this checkout; its dependencies come from pip's index.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.ansible_run import recap, run_role, write_vars
from tests.conftest import REPO, required_tool
from tests.e2e.cluster import StartCluster
from tests.integration.harp_client import Client
from tests.integration.test_ansible_role import site_vars

NOOP = """
function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
"""
USER = "harp-e2e"  # the role creates it; removed at the end


@pytest.fixture
def own_user() -> Iterator[str]:
    # Also before: a user left by an interrupted run would make the first run a change of it.
    subprocess.run(["userdel", USER], capture_output=True, check=False)
    yield USER
    subprocess.run(["userdel", USER], capture_output=True, check=False)


def test_the_role_installs_a_working_site_and_a_second_run_changes_nothing(
    start_cluster: StartCluster, trained_store: Path, tmp_path: Path, own_user: str
) -> None:
    analyze = required_tool("systemd-analyze", "systemd")
    cluster = start_cluster(job_submit_lua=NOOP, nodes=1)
    conf = cluster.slurm_conf.read_text()
    # The role may manage slurm.conf: take out a line it must put back (slurmctld read it already).
    cluster.slurm_conf.write_text(conf.replace("AccountingStoreFlags=job_comment\n", ""))
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(REPO)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    variables = write_vars(
        tmp_path,
        site_vars(
            tmp_path,
            slurm_harp_package="slurm-harp==0.1.0",
            slurm_harp_pip_extra_args=f"--find-links {wheels}",
            slurm_harp_python=sys.executable,
            slurm_harp_slurm_conf_dir=str(cluster.conf_dir),
            slurm_harp_create_user=True,
            slurm_harp_user=own_user,
            slurm_harp_guard_user="root",
            slurm_harp_manage_slurm_conf=True,
            # The production 50 ms leaves a busy 2-core test machine no room for a first call.
            slurm_harp_deadline_ms=1000,
        ),
    )

    first = run_role(tmp_path, variables)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert recap(first)[1] > 0
    assert "this role never does" in first.stdout  # slurm.conf changed: reported, slurmctld untouched
    assert cluster.slurm_conf.read_text().endswith("AccountingStoreFlags=job_comment\n")
    second = run_role(tmp_path, variables, "-v", "--diff")  # says why, should anything change
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second)[1] == 0, changed_tasks(second.stdout)  # idempotent

    venv, etc, state = tmp_path / "venv", tmp_path / "etc-harp", tmp_path / "state"
    assert (etc / "harp.toml").stat().st_mode & 0o777 == 0o640
    assert (state.stat().st_uid, state.stat().st_mode & 0o777) == (_uid(own_user), 0o750)
    units = sorted((tmp_path / "systemd").iterdir())
    assert [u.name for u in units] == [
        "slurm-harp-guard.service", "slurm-harp-harvest.service", "slurm-harp-harvest.timer",
        "slurm-harp-nightly.service", "slurm-harp-nightly.timer", "slurm-harp.service",
    ]  # fmt: skip
    daemon_unit = (tmp_path / "systemd" / "slurm-harp.service").read_text()
    assert f"ExecStart={venv}/bin/harp serve --config {etc}/harp.toml" in daemon_unit
    assert f"User={own_user}" in daemon_unit
    verified = subprocess.run(
        [analyze, "verify", *map(str, units)], capture_output=True, text=True, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr

    # What systemd would start: the installed harp with the installed configuration.
    shutil.copytree(trained_store, state / "models")
    log = (tmp_path / "daemon.log").open("wb")  # read on failure
    daemon = subprocess.Popen(
        [str(venv / "bin" / "harp"), "serve", "--config", str(etc / "harp.toml")], stdout=log, stderr=log
    )
    try:
        socket = tmp_path / "run" / "harp.sock"
        deadline = time.monotonic() + 60
        while not _serving(socket):
            assert daemon.poll() is None and time.monotonic() < deadline, log.name
            time.sleep(0.2)
        job = cluster.sbatch(["-t", "120", "-J", "through-ansible"], "#!/bin/sh\nsleep 1\n")
        assert job.job_id is not None, job.stderr
        comment = cluster.scontrol_show_job(job.job_id).get("AdminComment", "")
        assert comment.startswith("harp:shadow,t="), (comment, (tmp_path / "daemon.log").read_text()[-2000:])
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def changed_tasks(output: str) -> str:
    """The tasks a play reports as changed, with what ansible said of each."""
    task, found = "", []
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            found.append(f"{task}\n{line[:600]}")
    return "\n".join(found) or output[-4000:]


def _serving(socket: Path) -> bool:
    if not socket.exists():
        return False
    with Client(socket) as client:
        try:
            return bool(client.status() == "SERVING")
        except grpc.RpcError:
            return False


def _uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid
