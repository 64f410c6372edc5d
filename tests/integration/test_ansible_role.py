"""deploy/ansible without a cluster: ansible-lint and the syntax check pass; a wrong variable, a
slurm.conf without the plugin or a site's own job_submit.lua stop the role before it changes
anything; the opt-in slurm.conf edit is idempotent and never restarts slurmctld; and the role's unit
templates render to deploy/systemd with the defaults. tests/e2e/test_ansible_role.py installs for real."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_harp.config import load
from tests.conftest import REPO
from tests.integration.ansible_play import (
    ANSIBLE_DIR,
    INSTALL_DIRS,
    ROLE_DIR,
    ansible_tool,
    clean_env,
    require_root,
    role_vars,
    run_role,
)

SLURM_CONF = "ClusterName=test\nSlurmUser=root\nJobSubmitPlugins=lua\nAccountingStoreFlags=job_comment\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory with a slurm.conf that has what the plugin needs; the role installs under tmp_path."""
    conf_dir = tmp_path / "slurm"
    conf_dir.mkdir()
    (conf_dir / "slurm.conf").write_text(SLURM_CONF)
    return conf_dir


def installed(base: Path) -> list[str]:
    return sorted(d for d in INSTALL_DIRS if (base / d).exists())


def test_ansible_lint_is_clean() -> None:
    done = subprocess.run(
        [ansible_tool("ansible-lint"), "--nocolor"],
        cwd=ANSIBLE_DIR, env=clean_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in done.stdout + done.stderr


def test_the_example_playbook_passes_the_syntax_check() -> None:
    done = subprocess.run(
        [ansible_tool("ansible-playbook"), "--syntax-check", "-i", "inventory.example.ini", "site.yml"],
        cwd=ANSIBLE_DIR, env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


WRONG_VARIABLES: dict[str, tuple[dict[str, Any], str]] = {
    "unknown mode": (
        {"slurm_harp_policy_mode": "rewrit"},
        "value of slurm_harp_policy_mode must be one of: off, shadow, time_min, extend, rewrite, got: rewrit",
    ),
    "mode of the wrong type": (
        {"slurm_harp_plugin_deadline_ms": "fast"},
        "argument 'slurm_harp_plugin_deadline_ms' is of type str and we were unable to convert to int",
    ),
    "rule without a match": (
        {"slurm_harp_policy_rules": [{"mode": "extend"}]},
        "one of the following is required: partition, account found in slurm_harp_policy_rules",
    ),
    "deadline out of range": (
        {"slurm_harp_plugin_deadline_ms": 5000},
        "slurm_harp_plugin_deadline_ms must be 1 to 1000",
    ),
    "relative path": (
        {"slurm_harp_state_dir": "var/lib/slurm-harp"},
        "slurm_harp_state_dir must be an absolute path",
    ),
    "advice socket outside the socket's directory": (
        {"slurm_harp_advice_enabled": True, "slurm_harp_advice_socket": "/tmp/advice.sock"},
        "slurm_harp_advice_socket must be another file in the directory of slurm_harp_socket",
    ),
    "advice socket that is the submission socket": (
        {"slurm_harp_advice_enabled": True, "slurm_harp_advice_socket": "/run/slurm-harp/harp.sock"},
        "slurm_harp_advice_socket must be another file in the directory of slurm_harp_socket",
    ),
    "negative price": (
        {"slurm_harp_billing_price": -1},
        "slurm_harp_billing_price must be a number of 0 or more, got -1",
    ),
    "price that is no number": (
        {"slurm_harp_billing_price": "cheap"},
        "argument 'slurm_harp_billing_price' is of type str and we were unable to convert to float",
    ),
    "quoted partition price": (
        {"slurm_harp_billing_partitions": [{"name": "gpu", "price": "2.5"}]},
        "every price in slurm_harp_billing_partitions must be a number of 0 or more (unquoted)",
    ),
    "partition neither priced nor weighted": (
        {"slurm_harp_billing_partitions": [{"name": "gpu"}]},
        "one of the following is required: price, weights found in slurm_harp_billing_partitions",
    ),
    "unknown billing mode": (
        {"slurm_harp_billing_mode": "max"},
        "value of slurm_harp_billing_mode must be one of: , sum, max_tres, max_tres_gres, got: max",
    ),
    "GPU without memory": (
        {"slurm_harp_advice_partitions": [{"name": "gpu", "gpu_memory_gb": 0}]},
        "every gpu_memory_gb in slurm_harp_advice_partitions must be a number of GB above 0",
    ),
    "group root for the socket": (
        {"slurm_harp_socket_group": "root"},
        "the socket group would be root, root's group (gid 0): every process of group root could",
    ),
    # slurmctld could not open the socket (0660) nor the guard read harp.toml: every job unchanged.
    "socket group SlurmUser is not in": (
        {"slurm_harp_slurm_user": "nobody", "slurm_harp_socket_group": "daemon"},
        "SlurmUser nobody is not in the socket group daemon (slurm_harp_socket_group): slurmctld could not",
    ),
    # harp_plugin.lua and the units' ReadWritePaths= would not have followed.
    "state moved through slurm_harp_config": (
        {"slurm_harp_config": {"store": {"path": "/srv/harp/models"}}},
        'slurm_harp_config must not set store.path to "/srv/harp/models" (the role\'s is',
    ),
    # YAML's null for a section whose keys are commented out: it took the place of the role's [history].
    "a section of the role's left empty in slurm_harp_config": (
        {"slurm_harp_config": {"history": None}},
        "slurm_harp_config must not set history to null, which would take the place of the role's [history]",
    ),
    # check-config refused it at "Write harp.toml", after the first changes.
    "socket mode that shuts out the socket group": (
        {"slurm_harp_config": {"server": {"socket_mode": "0600"}}},
        'slurm_harp_config must not set server.socket_mode to "0600": the socket group slurm-harp must be',
    ),
    "the role's group root, the socket group of a root SlurmUser": (
        {"slurm_harp_group": "root"},
        "join group root. Set slurm_harp_group to a group of its own",
    ),
    # The role set the owner, group and mode of /run (slurm-harp:slurm 0750) or /tmp (its sticky
    # bit gone) for a socket directly in it, of /var/lib for the state.
    "socket directly in /run": (
        {"slurm_harp_socket": "/run/harp.sock"},
        "slurm_harp_socket must be in a directory of harp's own, such as /run/slurm-harp/harp.sock, "
        "not directly in /run: the role sets that directory's owner, group and mode for harp",
    ),
    "socket directly in /tmp": (
        {"slurm_harp_socket": "/tmp/harp.sock"},
        "not directly in /tmp: the role sets that directory's owner, group and mode for harp, and the "
        "other programs that share /tmp rely on them (its sticky bit)",
    ),
    "state directory /var/lib": (
        {"slurm_harp_state_dir": "/var/lib"},
        "slurm_harp_state_dir must be a directory of harp's own, such as /var/lib/slurm-harp, not /var/lib",
    ),
    # YAML reads an unquoted 0123 as 83: the role took the number and wrote "83", a rule for no job.
    "unquoted all-digit account": (
        {"slurm_harp_policy_rules": [{"account": 2024001, "mode": "rewrite"}]},
        'must be a string: quote it (account: "2024001"; YAML reads an unquoted 0123 as 83 and off as '
        "false, so the role cannot take a number, a boolean, a list or null for a name), got "
        "slurm_harp_policy_rules[0].account = 2024001",
    ),
    # systemd would own /run/lock (RuntimeDirectory=lock, 0750) and remove it when slurm-harp stops.
    "socket in /var/run/lock": (
        {"slurm_harp_socket": "/var/run/lock/harp.sock"},
        "slurm_harp_socket must be in a directory of harp's own, named for it, such as "
        "/run/slurm-harp/harp.sock, not in /var/run/lock: systemd makes the socket directory /run/lock",
    ),
    "rule for two partitions": (
        {"slurm_harp_policy_rules": [{"partition": "debug,short", "mode": "off"}]},
        "every partition and account in slurm_harp_policy_rules must be one name, with no comma",
    ),
    # -e key=value gives text, which the argument specs take for a list but do not convert: "train"
    # installed the extras t, r, a, i and n (a serving-only install: no nightly training).
    "a list given as text": (
        {"slurm_harp_pip_extras": "train"},
        'slurm_harp_pip_extras must be a list, got the text "train": -e key=value and an INI inventory '
        "give text; give it in YAML or JSON (group_vars, -e @vars.yml, or "
        "-e '{\"slurm_harp_pip_extras\": [...]}')",
    ),
    # ... and a dict: a later check stopped on "object of type 'str' has no attribute 'get'".
    "a dict given as text": (
        {"slurm_harp_config": '{"training": {"threads": 2}}'},
        "slurm_harp_config must be a dict, got the text",
    ),
    "partition named twice": (
        {
            "slurm_harp_advice_partitions": [
                {"name": "gpu", "gpu_memory_gb": 80},
                {"name": "gpu", "gpu_memory_gb": 40},
            ]
        },
        "slurm_harp_billing_partitions and slurm_harp_advice_partitions must each name a partition once",
    ),
}


@pytest.mark.parametrize("wrong", WRONG_VARIABLES, ids=list(WRONG_VARIABLES))
def test_a_wrong_variable_stops_the_role_before_any_change(wrong: str, site: Path, tmp_path: Path) -> None:
    overrides, message = WRONG_VARIABLES[wrong]
    result = run_role(tmp_path / "play", role_vars(tmp_path, site, **overrides))
    assert result.returncode != 0
    assert message in result.output, result.output[-3000:]
    assert result.recap()["changed"] == 0
    assert installed(tmp_path) == []


def test_a_slurm_conf_without_the_plugin_stops_the_role_with_instructions(site: Path, tmp_path: Path) -> None:
    (site / "slurm.conf").write_text(
        "ClusterName=test\n# JobSubmitPlugins=lua\nAccountingStoreFlags=job_comment\n"
    )
    result = run_role(tmp_path / "play", role_vars(tmp_path, site))
    assert result.returncode != 0
    text = " ".join(result.output.split())
    assert f"{site}/slurm.conf lacks JobSubmitPlugins=lua. This role does not edit slurm.conf" in text
    assert "restart slurmctld once, then run this play again" in text
    assert "set slurm_harp_manage_slurm_conf: true" in text
    assert installed(tmp_path) == []
    assert sorted(p.name for p in site.iterdir()) == ["slurm.conf"]


def test_a_sites_own_job_submit_lua_is_left_alone(site: Path, tmp_path: Path) -> None:
    own = "function slurm_job_submit() return slurm.SUCCESS end\n"
    (site / "job_submit.lua").write_text(own)
    result = run_role(tmp_path / "play", role_vars(tmp_path, site))
    assert result.returncode != 0
    text = " ".join(result.output.split())
    assert "is the site's own job_submit.lua, not slurm-harp's: this role does not replace it" in text
    assert "Set slurm_harp_install_job_submit: false" in text
    assert (site / "job_submit.lua").read_text() == own
    assert installed(tmp_path) == []


def test_the_opt_in_slurm_conf_edit_adds_the_lines_once(site: Path, tmp_path: Path) -> None:
    (site / "slurm.conf").write_text("ClusterName=test\nJobSubmitPlugins=all_partitions\n")
    variables = role_vars(tmp_path, site, slurm_harp_manage_slurm_conf=True)
    first = run_role(tmp_path / "play", variables, "--tags", "slurm_harp_slurm_conf")
    assert first.returncode == 0, first.output[-3000:]
    assert first.recap()["changed"] == 2
    assert "slurm.conf changed: restart slurmctld once" in first.output
    lines = (site / "slurm.conf").read_text().splitlines()
    assert "JobSubmitPlugins=all_partitions,lua" in lines
    assert "AccountingStoreFlags=job_comment" in lines
    assert len(list(site.glob("slurm.conf.*~"))) == 2  # lineinfile's backups, one per change
    second = run_role(tmp_path / "play", variables, "--tags", "slurm_harp_slurm_conf")
    assert second.returncode == 0 and second.recap()["changed"] == 0, second.output[-3000:]


CONTROLLING = {"systemctl", "scontrol", "service", "kill", "pkill", "killall"}
SERVICE_MODULES = ("ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service")


def test_the_lines_may_sit_in_a_file_slurm_conf_includes(site: Path, tmp_path: Path) -> None:
    (site / "slurm.conf").write_text("ClusterName=test\nInclude harp.conf\n")
    (site / "harp.conf").write_text("JobSubmitPlugins=lua\nAccountingStoreFlags=job_comment\n")
    # The preflight (tagged always) alone: the slurm.conf tasks are off without manage_slurm_conf.
    result = run_role(tmp_path / "play", role_vars(tmp_path, site), "--tags", "slurm_harp_slurm_conf")
    assert result.returncode == 0, result.output[-3000:]
    assert result.recap()["changed"] == 0 and installed(tmp_path) == []


def _tasks(path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for task in yaml.safe_load(path.read_text()) or []:
        found.append(task)
        found += task.get("block", [])
    return found


def test_the_role_manages_only_its_own_services() -> None:
    """Never slurmctld: no task or handler starts, stops or restarts anything but harp's units."""
    units = set(yaml.safe_load((ROLE_DIR / "vars" / "main.yml").read_text())["__slurm_harp_units"])
    named = []
    for path in [*sorted((ROLE_DIR / "tasks").glob("*.yml")), ROLE_DIR / "handlers" / "main.yml"]:
        for task in _tasks(path):
            for module in SERVICE_MODULES:
                if module in task and "name" in task[module]:
                    named.append(task[module]["name"])
            assert "ansible.builtin.shell" not in task, task
            argv = task.get("ansible.builtin.command", {}).get("argv", [])
            assert not CONTROLLING & {Path(str(a)).name for a in argv}, task
            assert "slurmctld" not in str(argv) or argv[1:] == ["-V"], task  # only its version is read
    assert named and all(name in units or "{{" in name for name in named), named
    assert "{{ item }}" in named  # the timers, looped over __slurm_harp_timers


def tasks_play(tasks_from: str, **variables: str) -> str:
    """A play of the role's tasks/``tasks_from``.yml alone on localhost, with ``variables``."""
    include = {"name": "slurm_harp", "tasks_from": tasks_from}
    play = {"name": f"The role's {tasks_from} tasks", "hosts": "localhost", "gather_facts": False}
    play |= {"vars": variables, "tasks": [{"name": "Run them", "ansible.builtin.include_role": include}]}
    return yaml.safe_dump([play], sort_keys=False)


# The unit templates with the role's defaults, for a site whose SlurmUser is slurm.
TEMPLATE_PLAY = tasks_play(
    "units",
    __slurm_harp_slurm_user="slurm",
    __slurm_harp_slurm_group="slurm",
    __slurm_harp_socket_group="slurm",
)


def test_the_unit_templates_render_to_deploy_systemd_with_the_defaults(tmp_path: Path) -> None:
    """deploy/systemd holds the rendered defaults of the role's templates: one home, kept equal."""
    require_root()
    out = tmp_path / "units"
    out.mkdir()
    variables = {"slurm_harp_systemd_dir": str(out), "slurm_harp_manage_services": False}
    result = run_role(tmp_path / "play", variables, playbook=TEMPLATE_PLAY)
    assert result.returncode == 0, result.output[-3000:]
    shipped = REPO / "deploy" / "systemd"
    names = sorted(p.name for p in shipped.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    _same, mismatch, errors = filecmp.cmpfiles(shipped, out, names, shallow=False)
    assert mismatch == [] and errors == [], (mismatch, errors)


@pytest.mark.parametrize(("given", "advice"), [("false", False), ("true", True)])
def test_booleans_given_with_e_key_value_install_what_they_say(
    given: str, advice: bool, tmp_path: Path
) -> None:
    """`-e key=value` (and an INI inventory's [group:vars]) gives text: ansible-core 2.19 stopped the
    play at the units' first `when: slurm_harp_advice_enabled` ("Conditional result (True) was
    derived from value of type 'str'"), after harp.toml had been written with an advice socket."""
    require_root()
    out = tmp_path / "units"
    out.mkdir()
    variables = {"slurm_harp_systemd_dir": str(out)}
    extra = ["-e", f"slurm_harp_advice_enabled={given}", "-e", "slurm_harp_manage_services=false"]
    result = run_role(tmp_path / "play", variables, *extra, playbook=TEMPLATE_PLAY)
    assert result.returncode == 0, result.output[-3000:]
    assert (out / "slurm-harp.service.d" / "advice.conf").exists() is advice
    toml, _ = _rendered(tmp_path, {"slurm_harp_advice_enabled": given, "slurm_harp_metrics_port": "9900"})
    data = tomllib.loads(toml.read_text())
    assert ("advice" in data, data["server"]["metrics_port"]) == (advice, 9900)
    _check_config(toml)


def test_the_units_documentation_lines_name_files_the_role_installs(tmp_path: Path) -> None:
    """The wheel carries no documentation: the role installs what Documentation= names."""
    require_root()
    doc = tmp_path / "doc"
    variables = {"slurm_harp_doc_dir": str(doc)}
    result = run_role(tmp_path / "play", variables, playbook=tasks_play("docs"))
    assert result.returncode == 0, result.output[-3000:]
    default = yaml.safe_load((ROLE_DIR / "defaults" / "main.yml").read_text())["slurm_harp_doc_dir"]
    named = [
        line.removeprefix(f"Documentation=file://{default}/")
        for unit in sorted((REPO / "deploy" / "systemd").glob("*.service"))
        for line in unit.read_text().splitlines()
        if line.startswith("Documentation=")
    ]
    assert len(named) == 4 and all("://" not in n for n in named), named
    for name in named:
        assert (doc / name).read_bytes() == (REPO / name).read_bytes(), name


def test_the_wheel_is_built_from_the_source_alone_not_what_earlier_builds_left(tmp_path: Path) -> None:
    """pip builds in the tree it is given, and setuptools packs whatever that tree's build/lib holds
    (never cleaned): the role's wheel shipped a module deleted from the checkout since its last build."""
    require_root()
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    left = shutil.ignore_patterns("*.egg-info", "__pycache__")
    shutil.copytree(REPO / "daemon", source / "daemon", ignore=left)
    stale = source / "build" / "lib" / "slurm_harp"
    stale.mkdir(parents=True)
    (stale / "deleted_since.py").write_text("")  # what an earlier build of that checkout left
    # An editor's lock file, a link to nowhere, which stopped the copy: left out.
    (source / "daemon" / "slurm_harp" / ".#cli.py").symlink_to("user@host.12345:1700000000")
    before = sorted(p.relative_to(source) for p in source.rglob("*"))
    venv = tmp_path / "opt"
    variables = {
        "slurm_harp_source_dir": str(source),
        "slurm_harp_venv_dir": str(venv),
        "slurm_harp_python": sys.executable,
        "slurm_harp_pip_extras": [],
        "slurm_harp_pip_args": "--no-deps",  # the wheel alone: its dependencies are not under test
        "slurm_harp_manage_services": False,
    }
    result = run_role(tmp_path / "play", variables, playbook=tasks_play("daemon"))
    assert result.returncode == 0, result.output[-3000:]
    [wheel] = (venv / "wheels").glob("slurm_harp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "slurm_harp/cli.py" in names and "slurm_harp/py.typed" in names
    assert [n for n in names if "deleted_since" in n or ".#" in n] == []
    # Nor did the build leave anything in the checkout for the next one.
    assert sorted(p.relative_to(source) for p in source.rglob("*")) == before


CONFIG_PLAY = """\
- name: harp.toml and the advice drop-in from the role's templates, for a site whose SlurmUser is slurm
  hosts: localhost
  gather_facts: false
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  vars:
    __slurm_harp_socket_group: slurm
  tasks:
    - name: Render harp.toml
      ansible.builtin.template:
        src: {role}/templates/harp.toml.j2
        dest: {out}/harp.toml
        mode: "0644"
    - name: Render the advice drop-in
      ansible.builtin.template:
        src: {role}/templates/systemd/slurm-harp.service.d/advice.conf.j2
        dest: {out}/advice.conf
        mode: "0644"
"""
ADVICE = {
    "slurm_harp_advice_enabled": True,
    "slurm_harp_advice_partitions": [{"name": "gpu", "gpu_memory_gb": 80}],
    "slurm_harp_billing_price": 0.02,
    "slurm_harp_billing_currency": "EUR",
    "slurm_harp_billing_mode": "max_tres",
    "slurm_harp_billing_partitions": [
        {"name": "gpu", "price": 0.1, "weights": "CPU=1.0,Mem=0.25G,GRES/gpu=8.0"},
        {"name": "big", "price": 1},
    ],
}


def _rendered(tmp_path: Path, variables: dict[str, Any]) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    play = CONFIG_PLAY.format(role=ROLE_DIR, out=out)
    result = run_role(tmp_path / "play", variables, playbook=play)
    assert result.returncode == 0, result.output[-3000:]
    return out / "harp.toml", out / "advice.conf"


def _check_config(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "slurm_harp.cli", "check-config", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_advice_and_billing_variables_make_a_harp_toml_the_daemon_accepts(tmp_path: Path) -> None:
    toml, dropin = _rendered(tmp_path, ADVICE)
    assert "ok (policy mode shadow)" in _check_config(toml)
    data = tomllib.loads(toml.read_text())
    assert data["advice"] == {
        "socket": "/run/slurm-harp/advice.sock",
        "partition": [{"name": "gpu", "gpu_memory_gb": 80}],
    }
    assert data["billing"] == {
        "price": 0.02,
        "currency": "EUR",
        "mode": "max_tres",
        "partition": ADVICE["slurm_harp_billing_partitions"],
    }
    settings = load(toml)  # what the daemon makes of it
    assert settings.advice.socket == Path("/run/slurm-harp/advice.sock")
    assert settings.advice.gpu_memory_bytes == {"gpu": 80e9}
    assert settings.billing.currency == "EUR" and settings.billing.price == 0.02
    # The submission socket stays SlurmUser's group's alone.
    assert (settings.server.socket_mode, settings.server.socket_group) == (0o660, "slurm")
    lines = dropin.read_text().splitlines()
    assert lines[lines.index("[Service]") + 1] == "RuntimeDirectoryMode=0751"
    assert [line for line in lines if line and not line.startswith("#")] == [
        "[Service]",
        "RuntimeDirectoryMode=0751",
    ]


def test_quoted_all_digit_partition_and_account_names_make_a_harp_toml_the_daemon_accepts(
    tmp_path: Path,
) -> None:
    """Quoted, an all-digit name is a string, written as one (an unquoted one stops the preflight)."""
    variables = {
        "slurm_harp_policy_rules": [
            {"account": "2024001", "mode": "rewrite"},
            {"partition": "0123", "mode": "off"},
        ],
        "slurm_harp_billing_partitions": [{"name": "1", "price": 2}],
        "slurm_harp_advice_enabled": True,
        "slurm_harp_advice_partitions": [{"name": "7", "gpu_memory_gb": 80}],
    }
    toml, _ = _rendered(tmp_path, variables)
    assert "ok (policy mode shadow)" in _check_config(toml)
    settings = load(toml)
    assert [(r.partition, r.account) for r in settings.policy.rules] == [(None, "2024001"), ("0123", None)]
    assert settings.advice.gpu_memory_bytes == {"7": 80e9}
    assert tomllib.loads(toml.read_text())["billing"]["partition"] == [{"name": "1", "price": 2}]


def test_without_the_advice_variables_harp_toml_has_no_advice_socket_nor_billing(tmp_path: Path) -> None:
    toml, _ = _rendered(tmp_path, {})
    _check_config(toml)
    data = tomllib.loads(toml.read_text())
    assert "advice" not in data and "billing" not in data
    assert load(toml).advice.socket is None


# Text TOML reads back as written, whatever it holds: JSON's default wrote a character past U+FFFF
# as a surrogate pair, which TOML refuses (`\ud83d\udcb6`), and left DEL bare, which TOML refuses too.
# (Between other characters: an opt-out name with a space, U+2028 too, at an end is refused.)
AWKWARD = ["\U0001f4b6", "al\x7fice", 'a "quoted" \\ path', "tab\there\nnewline\x1b", "Z\u00fcrich \u2028 x"]


def test_any_text_and_nulls_make_a_harp_toml_that_reads_back(tmp_path: Path) -> None:
    variables = {
        "slurm_harp_billing_price": 0.5,
        "slurm_harp_billing_currency": AWKWARD[0],
        "slurm_harp_config": {
            # A null is no value (an unset key): it was taken for an array and the render failed,
            # 'NoneType' object is not iterable.
            "server": {"tcp": None},
            "policy": {"opt_out_users": [*AWKWARD[1:], None], "floor": {"cpus": None, "time_minutes": 15}},
            "billing": {"mode": None},
        },
    }
    toml, _ = _rendered(tmp_path, variables)
    data = tomllib.loads(toml.read_text(encoding="utf-8"))
    assert data["billing"] == {"price": 0.5, "currency": AWKWARD[0]}
    assert data["policy"]["opt_out_users"] == AWKWARD[1:]
    assert data["policy"]["floor"] == {"time_minutes": 15}
    assert "tcp" not in data["server"]
    assert "ok (policy mode shadow)" in _check_config(toml)
    settings = load(toml)
    assert settings.billing.currency == AWKWARD[0] and settings.server.tcp is None
    assert settings.policy.opt_out_users == frozenset(AWKWARD[1:])
