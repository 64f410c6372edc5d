"""The Ansible role (deploy/ansible) before it changes anything: lint, syntax, argument validation
and the preflight checks, run for real against this machine. Installing is tests/e2e/test_ansible_role.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.ansible_run import ANSIBLE_DIR, ansible_playbook, recap, run_role, write_inventory, write_vars
from tests.conftest import required_tool


def site_vars(work: Path, **over: Any) -> dict[str, Any]:
    """Every path of the role inside ``work``; nothing is started."""
    values: dict[str, Any] = {
        "slurm_harp_venv": str(work / "venv"),
        "slurm_harp_config_dir": str(work / "etc-harp"),
        "slurm_harp_state_dir": str(work / "state"),
        "slurm_harp_run_dir": str(work / "run"),
        "slurm_harp_lua_dir": str(work / "lua"),
        "slurm_harp_slurm_conf_dir": str(work / "etc-slurm"),
        "slurm_harp_systemd_dir": str(work / "systemd"),
        "slurm_harp_guard_heartbeat": str(work / "run" / "guard.heartbeat"),
        "slurm_harp_socket_group": "root",
        "slurm_harp_create_user": False,
        "slurm_harp_user": "root",
        "slurm_harp_manage_services": False,
    }
    return values | over


def test_the_role_is_ansible_lint_clean() -> None:
    lint = required_tool(str(Path(sys.executable).parent / "ansible-lint"), "ansible-lint (pip)")
    done = subprocess.run(
        [lint, "--offline", "--nocolor"],
        cwd=ANSIBLE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_playbook_parses(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path)
    done = subprocess.run(
        [ansible_playbook(), "-i", str(inventory), "--syntax-check", str(ANSIBLE_DIR / "site.yml")],
        capture_output=True, text=True, timeout=300, check=False,
        env={"ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_variable_fails_by_name_before_anything_changes(tmp_path: Path) -> None:
    done = run_role(tmp_path, write_vars(tmp_path, site_vars(tmp_path, slurm_harp_mode="agressive")))
    assert done.returncode != 0
    assert "value of slurm_harp_mode must be one of" in done.stdout, done.stdout[-3000:]
    assert recap(done)[1] == 0  # nothing changed
    assert not any((tmp_path / d).exists() for d in ("venv", "etc-harp", "state", "lua", "systemd"))


def test_preflight_names_what_slurm_conf_lacks(tmp_path: Path) -> None:
    required_tool("slurmctld", "slurmctld")
    conf = tmp_path / "etc-slurm"
    conf.mkdir()
    (conf / "slurm.conf").write_text("ClusterName=site\nAccountingStoreFlags=job_comment\n")
    done = run_role(tmp_path, write_vars(tmp_path, site_vars(tmp_path)))
    assert done.returncode != 0
    assert "needs JobSubmitPlugins=lua" in done.stdout and "slurm_harp_manage_slurm_conf" in done.stdout
    assert recap(done)[1] == 0
    assert not (tmp_path / "etc-harp").exists()
