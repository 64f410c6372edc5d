"""deploy/ansible's harp.toml tasks for real (ansible-playbook): a change to what the daemon or the
guard reads only at start restarts that service, any other change reloads it; the guard is wanted
whatever variable sets its mode. The handlers' systemd calls are skipped (no systemd as PID 1 here),
so what is shown is which handler each change notifies."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.config import load
from slurm_harp.config.start_only import DAEMON_GUARD_KEYS, DAEMON_SECTIONS, GUARD_KEYS, by_unit
from tests.conftest import REPO
from tests.integration.ansible_play import ROLE_DIR, PlayResult, require_root, run_role

CONFIG_PLAY = """\
- name: The role's harp.toml tasks and their handlers
  hosts: localhost
  gather_facts: false
  vars:
    __slurm_harp_socket_group: root
  tasks:
    - name: Write harp.toml
      ansible.builtin.include_role:
        name: slurm_harp
        tasks_from: config
        public: true
    - name: Say whether the guard is wanted
      ansible.builtin.debug:
        msg: "guard wanted: {{ slurm_harp_guard_enabled | bool }}"
"""
RESTART = "RUNNING HANDLER [slurm_harp : Restart slurm-harp]"
RESTART_GUARD = "RUNNING HANDLER [slurm_harp : Restart slurm-harp-guard]"
RELOAD = "RUNNING HANDLER [slurm_harp : Reload slurm-harp (SIGHUP re-reads harp.toml)]"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """The installed venv's harp and python, as this checkout's code (the role runs bin/harp)."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    run = f"PYTHONPATH={REPO / 'daemon'} exec {sys.executable}"
    for name, command in {"python": run, "harp": f"{run} -m slurm_harp.cli"}.items():
        script = root / "bin" / name
        script.write_text(f'#!/bin/sh\n{command} "$@"\n')
        script.chmod(0o755)
    return root


def _run(tmp_path: Path, venv: Path, **overrides: Any) -> PlayResult:
    require_root()
    variables = {
        "slurm_harp_venv_dir": str(venv),
        "slurm_harp_config_dir": str(tmp_path / "etc-harp"),
        "slurm_harp_state_dir": str(tmp_path / "state"),
        "slurm_harp_socket": str(tmp_path / "run" / "harp.sock"),
        "slurm_harp_user": "root",
        "slurm_harp_manage_services": False,
        **overrides,
    }
    return run_role(tmp_path / "play", variables, playbook=CONFIG_PLAY)


def _play(tmp_path: Path, venv: Path, **overrides: Any) -> PlayResult:
    result = _run(tmp_path, venv, **overrides)
    assert result.returncode == 0, result.output[-3000:]
    return result


def _notified(result: PlayResult) -> set[str]:
    return {h for h in (RESTART, RESTART_GUARD, RELOAD) if h in result.output}


def test_a_start_only_change_restarts_and_any_other_reloads(tmp_path: Path, venv: Path) -> None:
    first = _play(tmp_path, venv)
    assert {RESTART, RESTART_GUARD} <= _notified(first)  # no harp.toml before: restart both
    assert _notified(_play(tmp_path, venv)) == set()  # unchanged: nothing
    reloaded = _play(tmp_path, venv, slurm_harp_config={"policy": {"quantile": 0.8}})
    assert _notified(reloaded) == {RELOAD}, reloaded.output[-3000:]
    # The guard's heartbeat settings: the daemon must restart, or it keeps reading the old ones.
    stale = {"policy": {"quantile": 0.8}, "guard": {"stale_seconds": 90}}
    restarted = _play(tmp_path, venv, slurm_harp_config=stale)
    assert _notified(restarted) == {RESTART, RELOAD}, restarted.output[-3000:]
    assert load(tmp_path / "etc-harp" / "harp.toml").guard.stale_seconds == 90
    # The guard's metrics endpoint: the guard restarts; the daemon reads no more of [guard] than the
    # heartbeat's path and age, and is reloaded (it was restarted for any [guard] change).
    endpoint = _play(tmp_path, venv, slurm_harp_config=stale, slurm_harp_guard_metrics_port=9900)
    assert _notified(endpoint) == {RESTART_GUARD, RELOAD}, endpoint.output[-3000:]
    lead = {**stale, "guard": {"stale_seconds": 90, "lead_seconds": 120}}
    reloaded = _play(tmp_path, venv, slurm_harp_config=lead, slurm_harp_guard_metrics_port=9900)
    assert RESTART not in _notified(reloaded) and RESTART_GUARD not in _notified(reloaded), reloaded.output[
        -3000:
    ]


def test_a_mode_set_through_slurm_harp_config_wants_the_guard(tmp_path: Path, venv: Path) -> None:
    assert "guard wanted: False" in _play(tmp_path, venv).output
    for policy in ({"mode": "extend"}, {"rule": [{"partition": "debug", "mode": "time_min"}]}):
        result = _play(tmp_path, venv, slurm_harp_config={"policy": policy})
        assert "guard wanted: True" in result.output, (policy, result.output[-3000:])
    # A rule list in slurm_harp_config replaces the role's: its modes are what harp.toml has.
    rules = {"slurm_harp_policy_rules": [{"partition": "debug", "mode": "extend"}]}
    replaced = _play(tmp_path, venv, slurm_harp_config={"policy": {"rule": []}}, **rules)
    assert "guard wanted: False" in replaced.output


def test_the_start_only_view_follows_what_the_services_keep(tmp_path: Path) -> None:
    """harp check-config --start-only is the daemon's and the guard's own lists, and the role's
    README names the daemon's."""
    conf = tmp_path / "harp.toml"
    conf.write_text("[guard]\nstale_seconds = 60\nmetrics_port = 9900\n")
    view = by_unit(load(conf))
    assert set(view) == {"slurm-harp.service", "slurm-harp-guard.service"}
    assert view["slurm-harp-guard.service"] == repr(("127.0.0.1", 9900))
    assert "'guard.stale_seconds': 60.0" in view["slurm-harp.service"]
    assert GUARD_KEYS == ("metrics_address", "metrics_port")
    readme = " ".join((ROLE_DIR.parent.parent / "README.md").read_text().split())
    named = re.search(r"for the daemon the ((?:`\[\w+\]`(?:, | and )?)+) sections", readme)
    assert named and re.findall(r"\[(\w+)\]", named.group(1)) == list(DAEMON_SECTIONS)
    keys = re.search(r"sections and the guard's ((?:`\w+`(?:, | and )?)+)", readme)
    assert keys and tuple(re.findall(r"`(\w+)`", keys.group(1))) == DAEMON_GUARD_KEYS


def test_harp_toml_is_checked_as_harp_serve_checks_it_before_it_is_installed(
    tmp_path: Path, venv: Path
) -> None:
    """The validate step is `harp check-config`: a socket group this host lacks, set through
    slurm_harp_config (the preflight checks only slurm_harp_socket_group), stops the role before
    the installed harp.toml is replaced. The role's step ran load() alone, which passed it, and
    `harp serve` then refused the installed file."""
    _play(tmp_path, venv)
    installed = tmp_path / "etc-harp" / "harp.toml"
    good = installed.read_text()
    result = _run(tmp_path, venv, slurm_harp_config={"server": {"socket_group": "nosuchgroup-harp"}})
    assert result.returncode != 0
    said = "server.socket_group: no group 'nosuchgroup-harp' on this host"
    assert said in result.output, result.output[-3000:]
    assert installed.read_text() == good
