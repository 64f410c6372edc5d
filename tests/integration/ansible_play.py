"""Running the slurm_harp Ansible role (deploy/ansible) against this machine, with every path it
installs to under one directory, for the integration and end-to-end tests of the role."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

ANSIBLE_DIR = REPO / "deploy" / "ansible"
ROLE_DIR = ANSIBLE_DIR / "roles" / "slurm_harp"
RECAP = re.compile(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
PLAYBOOK = """\
- name: The slurm_harp role on this machine
  hosts: localhost
  gather_facts: false
  roles:
    - role: slurm_harp
"""


def ansible_tool(name: str) -> str:
    """An Ansible program from the dev extra (beside this Python, else on PATH). Where it is missing
    the test is skipped, except in CI (HARP_REQUIRE_CLUSTER=1), where that is a failure."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is not None:
        return found
    why = f"{name} is not installed (the dev extra: pip install -e '.[dev]')"
    if os.environ.get("HARP_REQUIRE_CLUSTER") == "1":
        pytest.fail(why)
    pytest.skip(why)


def require_root() -> None:
    """The role installs files owned by root and creates a system user."""
    if os.geteuid() != 0:
        why = "the slurm_harp role runs as root (it chowns to root and adds a system user)"
        if os.environ.get("HARP_REQUIRE_CLUSTER") == "1":
            pytest.fail(why)
        pytest.skip(why)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONPATH: what the role installed must work on its own."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


def role_vars(base: Path, slurm_conf_dir: Path, **overrides: Any) -> dict[str, Any]:
    """Variables that put everything the role installs under ``base`` (nothing under /etc, /opt...)."""
    variables: dict[str, Any] = {
        "slurm_harp_venv_dir": str(base / "opt"),
        "slurm_harp_config_dir": str(base / "etc-harp"),
        "slurm_harp_lua_dir": str(base / "lua"),
        "slurm_harp_doc_dir": str(base / "doc"),
        "slurm_harp_state_dir": str(base / "state"),
        "slurm_harp_systemd_dir": str(base / "systemd"),
        "slurm_harp_socket": str(base / "run" / "harp.sock"),
        "slurm_harp_slurm_conf_dir": str(slurm_conf_dir),
        "slurm_harp_source_dir": str(REPO),
        "slurm_harp_manage_services": False,  # no systemd as PID 1 here: the units are only installed
        "slurm_harp_pip_extras": [],  # serving needs no training libraries
        "slurm_harp_metrics_port": 0,
        "slurm_harp_guard_metrics_port": 0,
    }
    variables.update(overrides)
    return variables


INSTALL_DIRS = ("opt", "etc-harp", "lua", "doc", "state", "systemd", "run")


@dataclass(frozen=True)
class PlayResult:
    returncode: int
    output: str

    def recap(self) -> dict[str, int]:
        match = RECAP.search(self.output)
        assert match, self.output[-3000:]
        ok, changed, unreachable, failed = (int(g) for g in match.groups())
        return {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed}


def run_role(
    work: Path, variables: Mapping[str, Any], *args: str, playbook: str = PLAYBOOK, timeout: float = 600
) -> PlayResult:
    """``ansible-playbook`` of ``playbook`` on localhost (connection local) with ``variables``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "play.yml").write_text(playbook)
    (work / "vars.json").write_text(json.dumps(dict(variables)))
    (work / "inventory.ini").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    env = clean_env(
        ANSIBLE_ROLES_PATH=str(ANSIBLE_DIR / "roles"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_HOME=str(work / ".ansible"),
    )
    done = subprocess.run(
        [ansible_tool("ansible-playbook"), "-i", "inventory.ini", "-e", "@vars.json", *args, "play.yml"],
        cwd=work, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    return PlayResult(done.returncode, done.stdout + done.stderr)
