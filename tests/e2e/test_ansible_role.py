"""The slurm_harp Ansible role installs a working site: run against this machine (connection local)
with its paths in a temporary directory and the test cluster's slurm.conf directory, twice (the
second run changes nothing); its units pass `systemd-analyze verify`; and, with the daemon it
installed started here as its user (no systemd as PID 1 here), a job submitted to the cluster goes
through the job_submit.lua, the Lua modules and the harp_plugin.lua the role wrote."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.conftest import REPO, required_tool
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.integration.ansible_play import PlayResult, clean_env, require_root, role_vars, run_role
from tests.integration.harp_client import Client

# The role's system user, removed again at the end; its own name per run, so that two runs of this
# test at once on one machine (other checkouts) do not delete each other's user.
USER = f"harp-e2e-{os.getpid()}"


@dataclass(frozen=True)
class Deployment:
    cluster: SlurmCluster
    base: Path
    variables: dict[str, Any]
    first: PlayResult
    second: PlayResult

    def again(self, *args: str, **overrides: Any) -> PlayResult:
        """One more run of the role over this deployment."""
        return run_role(self.base / "play", {**self.variables, **overrides}, *args)

    @property
    def socket(self) -> Path:
        return self.base / "run" / "harp.sock"


def _remove_user() -> None:
    with contextlib.suppress(KeyError):
        pwd.getpwnam(USER)
        subprocess.run(["userdel", USER], check=False, capture_output=True)
    with contextlib.suppress(KeyError):
        grp.getgrnam(USER)
        subprocess.run(["groupdel", USER], check=False, capture_output=True)


@pytest.fixture(scope="module")
def deployed(start_module_cluster: StartCluster) -> Iterator[Deployment]:
    require_root()
    cluster = start_module_cluster(job_submit_lua=(REPO / "plugin" / "job_submit.lua").read_text())
    # slurmctld needs a job_submit.lua to start with JobSubmitPlugins=lua; the role installs its own.
    (cluster.conf_dir / "job_submit.lua").unlink()
    # Traversable by the role's user, which the daemon runs as (pytest's own tree is 0700).
    base = Path(tempfile.mkdtemp(prefix="harp-role-"))
    base.chmod(0o755)
    variables = role_vars(
        base,
        cluster.conf_dir,
        slurm_harp_user=USER,
        slurm_harp_group=USER,
        slurm_harp_policy_rules=[{"partition": "debug", "mode": "off"}],
        # The bundled model's calibrated rule keeps small requests; the quantile always annotates.
        slurm_harp_config={"policy": {"limits": "quantile"}},
    )
    try:
        first = run_role(base / "play", variables)
        second = run_role(base / "play", variables)
        yield Deployment(cluster, base, variables, first, second)
    finally:
        _remove_user()
        shutil.rmtree(base, ignore_errors=True)


def test_the_first_run_installs_and_the_second_changes_nothing(deployed: Deployment) -> None:
    assert deployed.first.returncode == 0, deployed.first.output[-4000:]
    assert deployed.first.recap()["changed"] > 0
    assert deployed.second.returncode == 0, deployed.second.output[-4000:]
    assert deployed.second.recap()["changed"] == 0, deployed.second.output[-4000:]


def _mode_owner(path: Path) -> tuple[str, str, str]:
    st = path.stat()
    return oct(st.st_mode & 0o7777), pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name


def test_files_users_and_modes(deployed: Deployment) -> None:
    base, conf = deployed.base, deployed.cluster.conf_dir
    assert deployed.first.returncode == 0, deployed.first.output[-4000:]
    # SlurmUser=root in the test cluster: its group, root, is the socket group.
    assert _mode_owner(base / "etc-harp") == ("0o750", "root", "root")
    assert _mode_owner(base / "etc-harp" / "harp.toml") == ("0o640", "root", "root")
    assert _mode_owner(base / "state") == ("0o750", USER, "root")
    assert _mode_owner(base / "run") == ("0o750", USER, "root")
    assert "root" in {g.gr_name for g in grp.getgrall() if USER in g.gr_mem}
    assert (conf / "job_submit.lua").read_bytes() == (REPO / "plugin" / "job_submit.lua").read_bytes()
    lua = sorted(p.name for p in (base / "lua" / "harp").iterdir())
    assert lua == sorted(p.name for p in (REPO / "plugin" / "harp").iterdir())
    assert f'lib_dir = "{base / "lua"}"' in (conf / "harp_plugin.lua").read_text()


def test_the_installed_units_pass_systemd_analyze_verify(deployed: Deployment) -> None:
    assert deployed.first.returncode == 0, deployed.first.output[-4000:]
    units = sorted(str(p) for p in (deployed.base / "systemd").iterdir())
    assert len(units) == 6
    done = subprocess.run(
        [required_tool("systemd-analyze", "systemd"), "verify", "--man=no", *units],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # verify also checks that each ExecStart= program exists: the installed venv's harp.
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr


@pytest.fixture(scope="module")
def daemon(deployed: Deployment, trained_store: Path) -> Iterator[Path]:
    """The installed venv's `harp serve` with the installed harp.toml, as the role's user."""
    assert deployed.first.returncode == 0, deployed.first.output[-4000:]
    models = deployed.base / "state" / "models"
    shutil.copytree(trained_store, models)
    subprocess.run(["chown", "-R", f"{USER}:root", str(models)], check=True)
    log = deployed.base / "daemon.log"
    harp = deployed.base / "opt" / "bin" / "harp"
    config = deployed.base / "etc-harp" / "harp.toml"
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [runuser, "-u", USER, "--", str(harp), "serve", "--config", str(config)],
            stdout=out, stderr=out, env=clean_env(),
        )  # fmt: skip
    try:
        _wait_serving(deployed.socket, proc, log)
        yield log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_serving(socket: Path, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the installed harp serve exited: {log.read_text()[-3000:]}")
        if socket.exists():
            with Client(socket) as client, contextlib.suppress(grpc.RpcError):
                if client.status() == "SERVING":
                    return
        time.sleep(0.1)
    raise AssertionError(f"the installed harp serve is not SERVING: {log.read_text()[-3000:]}")


def test_a_job_goes_through_the_deployed_plugin_and_daemon(deployed: Deployment, daemon: Path) -> None:
    cluster = deployed.cluster
    stat = deployed.socket.stat()
    assert oct(stat.st_mode & 0o777) == "0o660" and grp.getgrgid(stat.st_gid).gr_name == "root"
    assert pwd.getpwuid(stat.st_uid).pw_name == USER  # the daemon runs as the role's user
    shadowed = cluster.sbatch(["-H", "-t", "120", "-J", "deployed"], "#!/bin/sh\nsleep 1\n")
    off = cluster.sbatch(["-H", "-t", "120", "-p", "debug", "-J", "off"], "#!/bin/sh\nsleep 1\n")
    assert shadowed.job_id is not None and off.job_id is not None, shadowed.stderr + off.stderr
    try:
        tag = cluster.scontrol_show_job(shadowed.job_id).get("AdminComment", "")
        assert "harp:shadow," in tag, (tag, cluster.log_tails(), daemon.read_text()[-2000:])
        # The [[policy.rule]] the role wrote into harp.toml: partition debug is off.
        assert "harp:" not in cluster.scontrol_show_job(off.job_id).get("AdminComment", "")
    finally:
        cluster.run(["scancel", str(shadowed.job_id), str(off.job_id)])
    # The plugin loaded the modules the role installed, with the settings it wrote.
    loaded = f"harp: loaded from {deployed.base / 'lua'} (socket {deployed.socket}, deadline 50 ms)"
    assert loaded in cluster.slurmctld_log()
    assert os.access(deployed.base / "opt" / "bin" / "harp", os.X_OK)


def test_a_bad_harp_toml_is_refused_by_the_daemons_reader_before_it_is_written(deployed: Deployment) -> None:
    config = deployed.base / "etc-harp" / "harp.toml"
    before = config.read_bytes()
    bad = deployed.again("--tags", "slurm_harp_config", slurm_harp_config={"policy": {"quantile": 2}})
    assert bad.returncode != 0
    assert "policy.quantile: must be between 0 and 1" in bad.output, bad.output[-3000:]
    assert config.read_bytes() == before


def test_a_site_with_its_own_job_submit_lua_gets_the_lines_to_add(deployed: Deployment) -> None:
    shown = deployed.again("--tags", "slurm_harp_plugin", slurm_harp_install_job_submit=False)
    assert shown.returncode == 0 and shown.recap()["changed"] == 0, shown.output[-3000:]
    for line in (  # as ansible prints them: JSON strings
        f'local HARP_LIB = \\"{deployed.base / "lua"}\\"',
        f'socket = \\"{deployed.socket}\\",',
        "if harp_ok then pcall(harp.submit, job_desc, submit_uid, part_list) end",
    ):
        assert line in shown.output, (line, shown.output[-3000:])


def test_a_changed_plugin_setting_reaches_slurmctld_without_a_restart(
    deployed: Deployment, daemon: Path
) -> None:
    changed = deployed.again("--tags", "slurm_harp_plugin", slurm_harp_plugin_deadline_ms=60)
    assert changed.returncode == 0, changed.output[-3000:]
    assert (
        "RUNNING HANDLER [slurm_harp : Let slurmctld reload the plugin (touch job_submit.lua)]"
        in changed.output
    )
    cluster = deployed.cluster
    job = cluster.sbatch(["-H", "-t", "120", "-J", "reloaded"], "#!/bin/sh\nsleep 1\n")
    assert job.job_id is not None, job.stderr
    cluster.run(["scancel", str(job.job_id)])
    assert f"(socket {deployed.socket}, deadline 60 ms)" in cluster.slurmctld_log()
