"""The slurm_harp Ansible role installs a working site: run against this machine (connection local)
with its paths in a temporary directory and the test cluster's slurm.conf directory, twice (the
second run changes nothing); its units and the advice drop-in pass `systemd-analyze verify`; and,
with the daemon it installed started here as its user (no systemd as PID 1 here), a job submitted to
the cluster goes through the job_submit.lua, the Lua modules and the harp_plugin.lua the role wrote,
and user nobody gets advice through the advice socket but cannot connect to the submission socket."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.conftest import REPO, required_tool
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.integration.ansible_play import PlayResult, clean_env, require_root, role_vars, run_role
from tests.integration.as_user import connect_as
from tests.integration.harp_client import Client

# The role's system user, removed again at the end; its own name per run, so that two runs of this
# test at once on one machine (other checkouts) do not delete each other's user.
USER = f"harp-e2e-{os.getpid()}"
NOBODY = pwd.getpwnam("nobody")
# The advice socket for users, with prices and a GPU partition (docs/advice.md).
ADVICE = {
    "slurm_harp_advice_enabled": True,
    "slurm_harp_billing_price": 0.05,
    "slurm_harp_billing_currency": "EUR",
    "slurm_harp_billing_partitions": [{"name": "debug", "price": 0.1, "weights": "CPU=1.0,Mem=0.25G"}],
    "slurm_harp_advice_partitions": [{"name": "debug", "gpu_memory_gb": 80}],
}


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

    @property
    def advice_socket(self) -> Path:
        return self.base / "run" / "advice.sock"

    @property
    def dropin(self) -> Path:
        return self.base / "systemd" / "slurm-harp.service.d" / "advice.conf"


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
        **ADVICE,
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
    # SlurmUser=root in the test cluster: the socket group is the role's own group (here USER), never
    # root's, and the role's user is in no other (slurmctld as root connects whatever the group).
    assert _mode_owner(base / "etc-harp") == ("0o750", "root", USER)
    assert _mode_owner(base / "etc-harp" / "harp.toml") == ("0o640", "root", USER)
    assert _mode_owner(base / "state") == ("0o750", USER, USER)
    # With the advice socket users may enter the sockets' directory, not list it.
    assert _mode_owner(base / "run") == ("0o751", USER, USER)
    assert _mode_owner(deployed.dropin) == ("0o644", "root", "root")
    assert {g.gr_name for g in grp.getgrall() if USER in g.gr_mem} == set()
    assert tomllib.loads((base / "etc-harp" / "harp.toml").read_text())["server"]["socket_group"] == USER
    assert (conf / "job_submit.lua").read_bytes() == (REPO / "plugin" / "job_submit.lua").read_bytes()
    lua = sorted(p.name for p in (base / "lua" / "harp").iterdir())
    assert lua == sorted(p.name for p in (REPO / "plugin" / "harp").iterdir())
    assert f'lib_dir = "{base / "lua"}"' in (conf / "harp_plugin.lua").read_text()


def _verify(systemd_dir: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of the units there, with their drop-ins (it looks for them beside)."""
    units = sorted(str(p) for p in systemd_dir.iterdir() if p.is_file())
    assert len(units) == 6
    return subprocess.run(
        [required_tool("systemd-analyze", "systemd"), "verify", "--man=no", *units],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_the_installed_units_pass_systemd_analyze_verify(deployed: Deployment) -> None:
    assert deployed.first.returncode == 0, deployed.first.output[-4000:]
    assert "RuntimeDirectoryMode=0751" in deployed.dropin.read_text().splitlines()
    done = _verify(deployed.base / "systemd")
    # verify also checks that each ExecStart= program exists: the installed venv's harp.
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stdout + done.stderr


def test_the_installed_units_documentation_is_installed(deployed: Deployment) -> None:
    units = sorted((deployed.base / "systemd").glob("*.service"))
    named = [
        Path(line.removeprefix("Documentation=file://"))
        for unit in units
        for line in unit.read_text().splitlines()
        if line.startswith("Documentation=")
    ]
    assert len(named) == len(units) == 4
    assert all(path.is_relative_to(deployed.base / "doc") and path.is_file() for path in named), named


def test_systemd_analyze_verify_reads_the_advice_drop_in(deployed: Deployment, tmp_path: Path) -> None:
    """The check above covers the drop-in: a bad line in a copy of it is found, naming the file."""
    copy = tmp_path / "systemd"
    shutil.copytree(deployed.base / "systemd", copy)
    bad = copy / "slurm-harp.service.d" / "advice.conf"
    bad.write_text(bad.read_text().replace("RuntimeDirectoryMode=0751", "RuntimeDirectoryMode=banana"))
    done = _verify(copy)
    said = done.stdout + done.stderr
    assert f"{bad}:" in said and "Failed to parse mode value, ignoring: banana" in said, said


@pytest.fixture(scope="module")
def daemon(deployed: Deployment, trained_store: Path) -> Iterator[Path]:
    """The installed venv's `harp serve` with the installed harp.toml, as the role's user."""
    assert deployed.first.returncode == 0, deployed.first.output[-4000:]
    state, harp = deployed.base / "state", deployed.base / "opt" / "bin" / "harp"
    shutil.copytree(trained_store, state / "models")
    # The job store the advice reads, as the harvest timer makes it (here as root: the cluster's
    # slurm.conf is not the role's user's to read).
    env = deployed.cluster.env
    harvest = [str(harp), "harvest", "--db", str(state / "jobs.sqlite"), "--settle-seconds", "0"]
    done = subprocess.run(
        harvest,
        env={k: v for k, v in env.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(state)], check=True)
    log = deployed.base / "daemon.log"
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
    assert oct(stat.st_mode & 0o777) == "0o660" and grp.getgrgid(stat.st_gid).gr_name == USER
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


def test_nobody_gets_advice_but_cannot_reach_the_submission_socket(
    deployed: Deployment, daemon: Path
) -> None:
    """The directory is 0751 for the advice socket: the submission socket must refuse users itself."""
    advice = deployed.advice_socket.stat()
    assert oct(advice.st_mode & 0o777) == "0o666", oct(advice.st_mode)
    with pytest.raises(OSError, match="Permission denied"):
        connect_as(NOBODY.pw_uid, deployed.socket).close()
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    harp = deployed.base / "opt" / "bin" / "harp"
    argv = [str(harp), "advise", "--socket", str(deployed.advice_socket), "--name", "deployed"]
    done = subprocess.run(
        [runuser, "-u", "nobody", "--", *argv],
        cwd="/tmp", env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr, daemon.read_text()[-2000:])
    print(done.stdout)  # shown with -s
    # Nobody ran no job "deployed" (root did): the daemon knows the caller, and prices in the role's EUR.
    first, second, *_ = done.stdout.splitlines()
    assert first == 'advice for "deployed" of user nobody, from your runs: no evidence', done.stdout
    assert second.startswith("(costs in EUR,"), done.stdout
    # Users may enter the directory, not list it.
    listing = subprocess.run(
        [runuser, "-u", "nobody", "--", "ls", str(deployed.socket.parent)],
        cwd="/tmp", env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert listing.returncode != 0 and "Permission denied" in listing.stderr, listing.stdout + listing.stderr


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


RESTART = "RUNNING HANDLER [slurm_harp : Restart slurm-harp]"
RELOAD = "RUNNING HANDLER [slurm_harp : Reload slurm-harp (SIGHUP re-reads harp.toml)]"


def test_a_harp_toml_change_restarts_or_reloads_as_the_installed_harp_says(deployed: Deployment) -> None:
    """The installed harp's check-config --start-only decides: a new guard stale_seconds (which the
    daemon reads only at start) restarts the daemon, a policy change reloads it."""
    policy = deployed.variables["slurm_harp_config"]["policy"]
    runs = {
        "restart": {"policy": policy, "guard": {"stale_seconds": 90}},
        "reload": {"policy": {**policy, "quantile": 0.8}, "guard": {"stale_seconds": 90}},
        "back": {"policy": policy},
    }
    out = {}
    for name, config in runs.items():
        out[name] = deployed.again("--tags", "slurm_harp_config", slurm_harp_config=config)
        assert out[name].returncode == 0, out[name].output[-3000:]
    assert RESTART in out["restart"].output, out["restart"].output[-3000:]
    reloaded = out["reload"].output
    assert RELOAD in reloaded and RESTART not in reloaded, reloaded[-3000:]
    assert RESTART in out["back"].output  # stale_seconds back to its default


def test_turning_advice_off_removes_the_drop_in_and_closes_the_directory(deployed: Deployment) -> None:
    """Last: it changes the deployment the tests above share."""
    off = deployed.again(slurm_harp_advice_enabled=False)
    assert off.returncode == 0, off.output[-3000:]
    assert "RUNNING HANDLER [slurm_harp : Reload systemd]" in off.output  # skipped here: no systemd
    assert not deployed.dropin.exists()
    assert _mode_owner(deployed.socket.parent) == ("0o750", USER, USER)
    written = tomllib.loads((deployed.base / "etc-harp" / "harp.toml").read_text())
    assert "socket" not in written["advice"]  # its GPU partitions stay: they are still set
    again = deployed.again(slurm_harp_advice_enabled=False)
    assert again.returncode == 0 and again.recap()["changed"] == 0, again.output[-3000:]
