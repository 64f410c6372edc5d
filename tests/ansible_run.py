"""Running the project's Ansible role (deploy/ansible) on this machine, for the tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO, required_tool

ANSIBLE_DIR = REPO / "deploy" / "ansible"
RECAP = re.compile(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


def ansible_playbook() -> str:
    """The ansible-playbook beside this Python (the dev extra installs ansible-core)."""
    return required_tool(str(Path(sys.executable).parent / "ansible-playbook"), "ansible-core (pip)")


def write_inventory(work: Path) -> Path:
    inventory = work / "inventory.ini"
    inventory.write_text(
        "[slurm_controllers]\n"
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return inventory


def write_vars(work: Path, values: dict[str, Any]) -> Path:
    """Extra variables as a YAML file (JSON is YAML)."""
    import json

    path = work / "vars.json"
    path.write_text(json.dumps(values))
    return path


def run_role(
    work: Path, variables: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [ansible_playbook(), "-i", str(write_inventory(work)), "-e", f"@{variables}", *extra]
    argv.append(str(ANSIBLE_DIR / "site.yml"))
    base = {k: v for k, v in (env or os.environ).items() if k != "PYTHONPATH"}  # the role's pip: its own venv
    environment = base | {
        "ANSIBLE_ROLES_PATH": str(ANSIBLE_DIR / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_REMOTE_TEMP": str(work / "ansible-tmp"),
        "PATH": f"{Path(sys.executable).parent}:{(env or os.environ).get('PATH', '')}:/usr/sbin:/usr/bin",
    }
    return subprocess.run(argv, capture_output=True, text=True, env=environment, timeout=900, check=False)


def recap(done: subprocess.CompletedProcess[str]) -> tuple[int, int, int]:
    """(ok, changed, failed) of the play on localhost."""
    match = RECAP.search(done.stdout)
    assert match, done.stdout[-3000:] + done.stderr[-3000:]
    ok, changed, _unreachable, failed = (int(g) for g in match.groups())
    return ok, changed, failed
