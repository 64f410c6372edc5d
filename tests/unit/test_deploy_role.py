"""deploy/ansible's role without running it: its own Jinja expressions, as its task files hold them,
rendered by Ansible's templating over made-up facts (slurm.conf texts, getent answers), and its
task files read as YAML. tests/integration/test_ansible_role.py runs the role."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_harp.config import ConfigError, parse
from slurm_harp.config.settings import GuardSettings
from tests.conftest import REPO

ansible_template = pytest.importorskip("ansible.template", reason="ansible-core (the dev extra)")
ansible_dataloader = pytest.importorskip("ansible.parsing.dataloader")

ROLE = REPO / "deploy" / "ansible" / "roles" / "slurm_harp"


def _trusted(value: Any) -> Any:
    """The role's own YAML, which Ansible trusts as templates (ansible-core 2.19 marks them)."""
    if isinstance(value, str):
        return ansible_template.trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def role_vars(**facts: Any) -> dict[str, Any]:
    """The role's defaults and vars, with ``facts`` (what earlier tasks set or registered) over them."""
    variables: dict[str, Any] = {}
    for name in ("defaults", "vars"):
        variables |= _trusted(yaml.safe_load((ROLE / name / "main.yml").read_text()))
    return variables | facts


def render(text: str, variables: dict[str, Any]) -> Any:
    templar = ansible_template.Templar(loader=ansible_dataloader.DataLoader(), variables=variables)
    return templar.template(ansible_template.trust_as_template(text))


def task(tasks_file: str, name: str) -> dict[str, Any]:
    path = ROLE / tasks_file
    found: list[dict[str, Any]] = [t for t in yaml.safe_load(path.read_text()) if t.get("name") == name]
    assert len(found) == 1, (path, name)
    return found[0]


def set_facts(tasks_file: str, name: str, variables: dict[str, Any]) -> dict[str, Any]:
    """What that set_fact task sets (each value rendered over the facts before it, as Ansible does)."""
    values: dict[str, str] = task(tasks_file, name)["ansible.builtin.set_fact"]
    return variables | {key: render(text, variables) for key, text in values.items()}


def condition(expression: str | bool, variables: dict[str, Any]) -> bool:
    """A `when:` as Ansible evaluates it: ansible-core 2.19 fails the task on a result that is no
    boolean (the string "false" of an INI inventory or `-e`, which is true to Python)."""
    templar = ansible_template.Templar(loader=ansible_dataloader.DataLoader(), variables=variables)
    if isinstance(expression, str):
        expression = ansible_template.trust_as_template(expression)
    return bool(templar.evaluate_conditional(expression))


def runs(tasks_file: str, name: str, variables: dict[str, Any]) -> bool:
    when = task(tasks_file, name).get("when", [])
    conditions = [when] if isinstance(when, (str, bool)) else when
    return all(condition(c, variables) for c in conditions)


# --- slurm.conf's JobSubmitPlugins ------------------------------------------------------------


def _slurm_conf_facts(plugins_line: str) -> dict[str, Any]:
    text = f"ClusterName=test\n{plugins_line}\nAccountingStoreFlags=job_comment\n"
    variables = role_vars(__slurm_harp_slurm_conf_texts=[text])
    variables = set_facts("tasks/preflight.yml", "Note the plugin settings in slurm.conf", variables)
    return set_facts("tasks/preflight.yml", "Note what slurm.conf lacks", variables)


@pytest.mark.parametrize(
    "line",
    [
        "JobSubmitPlugins=lua",
        "JobSubmitPlugins=job_submit/lua",  # the older spelling: job_submit.c strips the prefix
        "JobSubmitPlugins=all_partitions,Job_Submit/Lua",
        "jobsubmitplugins = require_timelimit,job_submit/lua # comment",
    ],
)
def test_every_spelling_of_the_lua_plugin_counts_and_is_not_added_again(line: str) -> None:
    facts = _slurm_conf_facts(line)
    assert facts["__slurm_harp_slurm_conf_missing"] == []
    # With slurm_harp_manage_slurm_conf the line is left alone: `job_submit/lua,lua` would be two
    # contexts of one plugin, and job_submit.lua would run twice per submission.
    assert not runs("tasks/slurm_conf.yml", "Enable job_submit/lua in slurm.conf", facts)


def test_a_list_without_the_lua_plugin_is_reported_and_extended() -> None:
    facts = _slurm_conf_facts("JobSubmitPlugins=all_partitions,job_submit/require_timelimit")
    assert facts["__slurm_harp_slurm_conf_missing"] == ["JobSubmitPlugins=lua"]
    name = "Enable job_submit/lua in slurm.conf"
    assert runs("tasks/slurm_conf.yml", name, facts)
    line = task("tasks/slurm_conf.yml", name)["ansible.builtin.lineinfile"]["line"]
    assert render(line, facts) == "JobSubmitPlugins=all_partitions,job_submit/require_timelimit,lua"


# --- check mode -------------------------------------------------------------------------------

UNIT_MODULES = ("ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service")


def _touching_services() -> list[tuple[str, str]]:
    """(file, task name) of every task and handler that starts, restarts, reloads or enables a named
    unit, or waits for what one makes."""
    found = []
    for path in [*sorted((ROLE / "tasks").glob("*.yml")), ROLE / "handlers" / "main.yml"]:
        for t in yaml.safe_load(path.read_text()) or []:
            module = next((t[m] for m in UNIT_MODULES if m in t), None)
            if (module and "name" in module) or "ansible.builtin.wait_for" in t:
                found.append((str(path.relative_to(ROLE)), t["name"]))
    return found


def test_nothing_touches_a_unit_in_check_mode() -> None:
    """`ansible-playbook --check` on a fresh controller: the units were never written, so systemd
    answers "Could not find the requested service" to any call naming one, and no socket comes."""
    touching = _touching_services()
    assert len(touching) == 8, touching  # 3 enable-and-start tasks, 4 restarts or reloads, 1 wait
    wanted = {"slurm_harp_manage_services": True, "slurm_harp_guard_enabled": True}
    wanted |= {"slurm_harp_timers_enabled": True}
    for tasks_file, name in touching:
        assert runs(tasks_file, name, role_vars(ansible_check_mode=False, **wanted)), name
        assert not runs(tasks_file, name, role_vars(ansible_check_mode=True, **wanted)), name


# --- the socket group -------------------------------------------------------------------------


def _group_facts(
    user: str,
    uid: int,
    group: str,
    gid: int,
    socket_gid: int | None = None,
    own_gid: int | None = None,
    also_in: tuple[int, ...] = (),
    **overrides: Any,
) -> dict[str, Any]:
    """What the preflight registered for SlurmUser ``user`` (primary group ``group``, supplementary
    groups ``also_in``), as getent and `id -G` say, and the socket group it then notes (a group named in
    slurm_harp_socket_group has ``socket_gid``; the role's own group ``own_gid``, None: not created yet)."""
    socket_group = overrides.get("slurm_harp_socket_group") or group
    named_gid = gid if socket_gid is None else socket_gid
    own = overrides.get("slurm_harp_group", "slurm-harp")
    own_entry = None if own_gid is None else ["x", str(own_gid), ""]
    groups = [
        {"ansible_facts": {"getent_group": {g: ["x", str(i), ""]}}}
        for g, i in ((group, gid), (socket_group, named_gid))
    ] + [{"ansible_facts": {"getent_group": {own: own_entry}}}]
    variables = role_vars(
        __slurm_harp_slurm_user=user,
        __slurm_harp_slurm_user_entry={"ansible_facts": {"getent_passwd": {user: ["x", str(uid), str(gid)]}}},
        __slurm_harp_group_entries={"results": groups},
        __slurm_harp_slurm_user_groups={"stdout": " ".join(str(g) for g in (gid, *also_in)) + "\n"},
        **overrides,
    )
    return set_facts("tasks/preflight.yml", "Note SlurmUser's group and the socket group", variables)


NOT_ROOTS = "Check that the socket group is not root's"
SLURM_USER_IN_IT = "Check that SlurmUser is in the socket group"
NO_FIXED_KEY = "Check that slurm_harp_config sets no key the role sets from its own variables"


def _refusal(facts: dict[str, Any], check_name: str = NOT_ROOTS) -> str | None:
    """The message of that check of the preflight when it refuses, else None."""
    check = task("tasks/preflight.yml", check_name)["ansible.builtin.assert"]
    if render(f"{{{{ {check['that']} }}}}", facts):
        return None
    return " ".join(str(render(check["fail_msg"], facts)).split())


def _supplementary(facts: dict[str, Any]) -> Any:
    name = "Create the user of slurm-harp, in the socket group"
    groups = task("tasks/user.yml", name)["ansible.builtin.user"]["groups"]
    return render(groups, facts) if isinstance(groups, str) else [render(g, facts) for g in groups]


def test_a_root_slurm_user_gets_the_roles_own_group_as_the_socket_group() -> None:
    """Not group root: it would put the role's user in root's group and run the units with
    Group=root. slurmctld as root connects whatever the socket's group."""
    facts = _group_facts("root", 0, "root", 0)
    assert (facts["__slurm_harp_slurm_group"], facts["__slurm_harp_socket_group"]) == ("root", "slurm-harp")
    assert _supplementary(facts) == []  # its own primary group already
    assert render("{{ __slurm_harp_toml.server.socket_group }}", facts) == "slurm-harp"


def test_the_socket_group_is_slurm_users_group_or_the_one_named() -> None:
    facts = _group_facts("slurm", 64030, "slurm", 64030)
    assert (facts["__slurm_harp_slurm_group"], facts["__slurm_harp_socket_group"]) == ("slurm", "slurm")
    assert _supplementary(facts) == ["slurm"]
    named = _group_facts("root", 0, "root", 0, socket_gid=1500, slurm_harp_socket_group="hpc-admin")
    assert named["__slurm_harp_socket_group"] == "hpc-admin"
    assert _supplementary(named) == ["hpc-admin"]
    for allowed in (facts, named, _group_facts("root", 0, "root", 0)):
        assert _refusal(allowed) is None


def test_group_root_is_refused_as_the_socket_group_of_a_slurm_user_other_than_root() -> None:
    """A SlurmUser whose primary group is root got group root for the socket (any process of group
    root could reach it) and the role's user joined group root; the site must name a group."""
    facts = _group_facts("slurm", 64030, "root", 0)
    assert facts["__slurm_harp_socket_group"] == "root"
    assert _refusal(facts) == (
        "the socket group would be root, root's group (gid 0), the primary group of SlurmUser slurm: "
        "every process of group root could reach the daemon and slurm-harp's user would join group "
        "root. Set slurm_harp_socket_group to another group slurm belongs to"
    )
    named = _group_facts("slurm", 64030, "root", 0, socket_gid=64031, slurm_harp_socket_group="slurm")
    assert (named["__slurm_harp_socket_group"], _refusal(named)) == ("slurm", None)
    # The role's own group, the socket group of a root SlurmUser: refused when it is root's.
    for own_gid in (None, 64040):
        assert _refusal(_group_facts("root", 0, "root", 0, own_gid=own_gid)) is None
    own_root = _group_facts("root", 0, "root", 0, own_gid=0, slurm_harp_group="root")
    assert _refusal(own_root) == (
        "the socket group would be root, root's group (gid 0): every process of group root could "
        "reach the daemon and slurm-harp's user would join group root. Set slurm_harp_group to a "
        "group of its own"
    )
    # Named outright, group root is refused too.
    root_named = _group_facts("slurm", 64030, "slurm", 64030, socket_gid=0, slurm_harp_socket_group="root")
    assert _refusal(root_named) == (
        "the socket group would be root, root's group (gid 0): every process of group root could "
        "reach the daemon and slurm-harp's user would join group root. Set slurm_harp_socket_group "
        "to another group slurm belongs to"
    )


def test_a_socket_group_slurm_user_is_not_in_is_refused() -> None:
    """slurmctld opens the socket (0660) and the guard reads harp.toml (0640) as SlurmUser, by the
    socket group: a group SlurmUser was not in passed, every job went through unchanged (an hour later
    HarpNoSubmissions) and the guard could not start."""
    facts = _group_facts("slurm", 64030, "slurm", 64030, socket_gid=1500, slurm_harp_socket_group="hpc-admin")
    assert _refusal(facts) is None  # not root's: the older check lets it by
    assert _refusal(facts, SLURM_USER_IN_IT) == (
        "SlurmUser slurm is not in the socket group hpc-admin (slurm_harp_socket_group): slurmctld could "
        "not open the daemon's socket (0660, group hpc-admin), so every job would pass unchanged, and the "
        "guard, run as slurm, could not read harp.toml. Add slurm to group hpc-admin (then restart "
        "slurmctld), or set slurm_harp_socket_group to a group slurm belongs to"
    )
    member = _group_facts(
        "slurm",
        64030,
        "slurm",
        64030,
        socket_gid=1500,
        also_in=(27, 1500),
        slurm_harp_socket_group="hpc-admin",
    )
    assert _refusal(member, SLURM_USER_IN_IT) is None
    # Its primary group, named or not; a root SlurmUser (it connects whatever the group).
    named_primary = _group_facts("slurm", 64030, "slurm", 64030, slurm_harp_socket_group="slurm")
    root_named = _group_facts("root", 0, "root", 0, socket_gid=1500, slurm_harp_socket_group="hpc-admin")
    for allowed in (_group_facts("slurm", 64030, "slurm", 64030), named_primary, root_named):
        assert _refusal(allowed, SLURM_USER_IN_IT) is None


def _fixed_key_refusal(config: dict[str, Any], **overrides: Any) -> str | None:
    facts = _group_facts("slurm", 64030, "slurm", 64030, slurm_harp_config=config, **overrides)
    return _refusal(facts, NO_FIXED_KEY)


STATE_DIR = "set slurm_harp_state_dir, the one directory the units may write (ReadWritePaths=)"


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (
            {"server": {"socket": "/run/slurm-harp/other.sock"}},
            'server.socket to "/run/slurm-harp/other.sock" (the role\'s is "/run/slurm-harp/harp.sock"): '
            "set slurm_harp_socket, which harp_plugin.lua and the daemon's unit follow",
        ),
        (
            {"server": {"socket_group": "hpc-admin"}},
            'server.socket_group to "hpc-admin" (the role\'s is "slurm"): set slurm_harp_socket_group',
        ),
        (
            {"store": {"path": "/srv/harp/models"}},
            'store.path to "/srv/harp/models" (the role\'s is "/var/lib/slurm-harp/models"): ' + STATE_DIR,
        ),
        ({"history": {"db": None}}, 'history.db to null (the role\'s is "/var/lib/slurm-harp/jobs.sqlite")'),
        (
            {"advice": {"socket": "/run/slurm-harp/advice.sock"}},
            'advice.socket to "/run/slurm-harp/advice.sock" (the role sets none): set '
            "slurm_harp_advice_enabled and slurm_harp_advice_socket",
        ),
        (
            {"guard": {"heartbeat": "/srv/harp/beat"}},
            "leave it out, the guard's unit may write only /run/slurm-harp-guard (RuntimeDirectory=)",
        ),
        (
            {"guard": {"state": "/srv/harp/limits.json"}},
            "leave it out, the guard's unit may write only /var/lib/slurm-harp-guard (StateDirectory=)",
        ),
    ],
    ids=[
        "server.socket",
        "server.socket_group",
        "store.path",
        "history.db",
        "advice.socket",
        "guard.heartbeat",
        "guard.state",
    ],
)
def test_slurm_harp_config_may_not_move_what_the_roles_other_files_are_made_for(
    config: dict[str, Any], said: str
) -> None:
    """slurm_harp_config is merged over what the role writes: a socket, a store or a job store moved
    there left harp_plugin.lua on the old socket and the units' ReadWritePaths= on the state directory
    (harvest and nightly failed at every run)."""
    refusal = _fixed_key_refusal(config)
    assert refusal is not None and refusal.startswith("slurm_harp_config must not set "), refusal
    assert said in refusal, refusal


def test_each_key_slurm_harp_config_may_not_move_is_named() -> None:
    moved = {
        "server": {"socket": "/run/slurm-harp/other.sock"},
        "store": {"path": "/srv/harp/models"},
        "history": {"db": "/srv/harp/jobs.sqlite"},
    }
    refusal = str(_fixed_key_refusal(moved))
    assert [part.split(" to ")[0] for part in refusal.split("; ")] == [
        "slurm_harp_config must not set server.socket",
        "slurm_harp_config must not set store.path",
        "slurm_harp_config must not set history.db",
    ]


def test_slurm_harp_config_may_set_the_other_keys_and_the_roles_own_values() -> None:
    guard = GuardSettings()
    for config in (
        {},
        {"training": {"threads": 2}, "server": {"metrics_address": "0.0.0.0", "tcp": None}},
        {"server": {"socket": "/run/slurm-harp/harp.sock", "socket_group": "slurm"}},
        {"server": {"socket": "/var/run/slurm-harp/harp.sock"}},  # the same socket, through /run's link
        {"guard": {"heartbeat": "/var/run/slurm-harp-guard/heartbeat"}},
        {"store": {"path": "/var/lib/slurm-harp/models"}, "history": {"window_days": 60}},
        {"guard": {"heartbeat": str(guard.heartbeat), "state": str(guard.state), "poll_seconds": 2}},
    ):
        assert _fixed_key_refusal(config) is None, config
    advice = {"advice": {"socket": "/run/slurm-harp/advice.sock", "max_connections": 32}}
    assert _fixed_key_refusal(advice, slurm_harp_advice_enabled=True) is None


@pytest.mark.parametrize(
    ("config", "overrides", "said"),
    [
        (
            {"history": None},
            {},
            "set history to null, which would take the place of the role's [history] and its db",
        ),
        (
            {"store": None},
            {"slurm_harp_state_dir": "/srv/harp"},
            "set store to null, which would take the place of the role's [store] and its path",
        ),
        ({"server": None}, {}, "[server] and its socket, socket_mode, socket_group"),
        ({"policy": None}, {}, "[policy] and its mode"),
        ({"history": []}, {}, "set history to [], which"),
    ],
    ids=["history", "store", "server", "policy", "a list"],
)
def test_a_section_of_the_roles_given_as_no_table_is_refused(
    config: dict[str, Any], overrides: dict[str, Any], said: str
) -> None:
    """YAML reads a section whose keys are all commented out as null, and the merge put that in place
    of the role's section: harp.toml lost history.db (nightly refused every night), store.path (the
    store went outside ReadWritePaths=) or [server]; the key-by-key check never saw it."""
    refusal = _fixed_key_refusal(config, **overrides)
    assert refusal is not None and refusal.startswith("slurm_harp_config must not set "), refusal
    assert said in refusal and refusal.endswith(": leave the section out or give it keys"), refusal
    # A section the role writes nothing into loses nothing.
    assert _fixed_key_refusal({"advice": None}) is None


def test_the_roles_paths_in_a_state_dir_given_with_a_trailing_slash_are_spelt_plain() -> None:
    """/var/lib/slurm-harp/ (accepted) made the role's store /var/lib/slurm-harp//models, and the same
    store spelt plainly in slurm_harp_config was refused as another."""
    facts = _group_facts("slurm", 64030, "slurm", 64030, slurm_harp_state_dir="/var/lib/slurm-harp/")
    toml = render("{{ __slurm_harp_toml }}", facts)
    assert (toml["store"]["path"], toml["history"]["db"]) == (
        "/var/lib/slurm-harp/models",
        "/var/lib/slurm-harp/jobs.sqlite",
    )
    store = {"store": {"path": "/var/lib/slurm-harp/models"}}
    assert _fixed_key_refusal(store, slurm_harp_state_dir="/var/lib/slurm-harp/") is None


def test_the_guard_paths_held_are_the_daemons_defaults_in_the_guard_units_directories() -> None:
    """Nothing of the role sets them: the guard's unit makes their directories writable, no other."""
    held = {k["key"]: k.get("default") for k in role_vars()["__slurm_harp_fixed_keys"]}
    guard = GuardSettings()
    assert (held["guard.heartbeat"], held["guard.state"]) == (str(guard.heartbeat), str(guard.state))
    lines = _unit("slurm-harp-guard.service", _unit_vars())
    assert f"RuntimeDirectory={guard.heartbeat.parent.relative_to('/run')}" in lines
    assert f"StateDirectory={guard.state.parent.relative_to('/var/lib')}" in lines


# --- harp.toml ---------------------------------------------------------------------------------


def test_harp_toml_is_validated_by_harp_check_config() -> None:
    """What `harp serve` checks (the socket group on this host too), not load() alone, which let
    a socket group set through slurm_harp_config that the host lacks be installed."""
    write = task("tasks/config.yml", "Write harp.toml, checked by harp check-config first")
    validate = write["ansible.builtin.template"]["validate"]
    assert (
        render(validate, role_vars(slurm_harp_venv_dir="/opt/harp")) == "/opt/harp/bin/harp check-config %s"
    )


# --- the wheel ---------------------------------------------------------------------------------


def test_the_wheel_is_built_from_a_copy_of_what_pyproject_builds_it_from() -> None:
    """The role copies these out of slurm_harp_source_dir and builds the copy (the checkout's build/lib
    put modules deleted from the source back into the wheel): what pyproject.toml needs, all of it."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    where = project["tool"]["setuptools"]["packages"]["find"]["where"]
    needed = {"pyproject.toml", project["project"]["readme"], *project["project"]["license-files"], *where}
    assert set(role_vars()["__slurm_harp_wheel_sources"]) == needed
    build = task("tasks/daemon.yml", "Build the wheel on the controller")["block"]
    pip = next(t for t in build if t["name"] == "Build the slurm-harp wheel from that copy")
    assert pip["ansible.builtin.command"]["argv"][-1] == "{{ __slurm_harp_build_dir.path }}/source"


def test_the_copy_leaves_out_links_to_nothing_and_keeps_the_others(tmp_path: Path) -> None:
    """An editor's lock file (.#cli.py, a link to nowhere) in daemon/ stopped the copy (shutil.Error)."""
    package = tmp_path / "source" / "daemon" / "slurm_harp"
    package.mkdir(parents=True)
    (package / "cli.py").write_text("cli\n")
    (package / ".#cli.py").symlink_to("user@host.12345:1700000000")
    (package / "alias.py").symlink_to("cli.py")  # relative: to be found from its directory
    copy_sources = str(render("{{ __slurm_harp_copy_sources }}", role_vars()))
    copy = tmp_path / "copy"
    run = subprocess.run(
        [sys.executable, "-c", copy_sources, str(tmp_path / "source"), str(copy), "daemon"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    copied = copy / "daemon" / "slurm_harp"
    assert sorted(p.name for p in copied.iterdir()) == ["alias.py", "cli.py"]
    assert (copied / "alias.py").read_text() == "cli\n"


# --- the variables: defaults, argument specs and the README's table ---------------------------


def test_the_defaults_the_argument_specs_and_the_readme_list_the_same_variables() -> None:
    defaults = set(yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()))
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = set(specs["argument_specs"]["main"]["options"])
    readme = (ROLE.parent.parent / "README.md").read_text()
    table = readme.split("\n## Variables\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    in_readme = {name for row in rows for name in re.findall(r"`(slurm_harp_\w+)`", row)}
    assert defaults == options == in_readme, (defaults ^ options, defaults ^ in_readme)


# --- the units' directories and services ---------------------------------------------------------

SOCKET_DIR_TASK = "Create the socket's directory (systemd does under /run), 0751 with the advice socket"


def _unit(name: str, variables: dict[str, Any]) -> list[str]:
    """The lines of the role's template of unit ``name`` rendered over ``variables``."""
    text = (ROLE / "templates" / "systemd" / f"{name}.j2").read_text()
    return str(render(text, variables)).splitlines()


def _unit_vars(**overrides: Any) -> dict[str, Any]:
    return role_vars(
        __slurm_harp_slurm_user="slurm",
        __slurm_harp_slurm_group="slurm",
        __slurm_harp_socket_group="slurm",
        role_path=str(ROLE),
        **overrides,
    )


@pytest.mark.parametrize("socket", ["/run/slurm-harp/harp.sock", "/var/run/slurm-harp/harp.sock"])
def test_a_socket_under_run_or_var_run_gets_a_runtime_directory(socket: str) -> None:
    """/var/run is /run (a link, on Debian and every systemd host): a directory the role made there
    once went with the first reboot, and systemd then refused to start the daemon (226/NAMESPACE:
    ReadWritePaths= named it). RuntimeDirectory= makes it at every start."""
    for advice in (False, True):
        variables = _unit_vars(slurm_harp_socket=socket, slurm_harp_advice_enabled=advice)
        lines = _unit("slurm-harp.service", variables)
        assert "RuntimeDirectory=slurm-harp" in lines
        assert "ReadWritePaths=/var/lib/slurm-harp" in lines  # the socket's directory is systemd's
        assert not runs("tasks/config.yml", SOCKET_DIR_TASK, variables)
        advice_conf = ROLE / "templates/systemd/slurm-harp.service.d/advice.conf.j2"
        dropin = render(advice_conf.read_text(), variables)
        assert "not under /run" not in dropin


@pytest.mark.parametrize("socket", ["/srv/harp/harp.sock", "/var/runner/harp.sock"])
def test_a_socket_elsewhere_gets_a_directory_the_role_makes(socket: str) -> None:
    variables = _unit_vars(slurm_harp_socket=socket)
    lines = _unit("slurm-harp.service", variables)
    directory = socket.rsplit("/", 1)[0]
    assert not [line for line in lines if line.startswith("RuntimeDirectory=")]
    assert f"ReadWritePaths=/var/lib/slurm-harp {directory}" in lines
    assert runs("tasks/config.yml", SOCKET_DIR_TASK, variables)


def _timer_tasks(variables: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(enabled, state) of each task of tasks/services.yml over the timers that runs."""
    found = []
    for t in yaml.safe_load((ROLE / "tasks" / "services.yml").read_text()):
        module = t.get("ansible.builtin.systemd_service")
        if module is None or t.get("loop") != "{{ __slurm_harp_timers }}":
            continue
        if runs("tasks/services.yml", t["name"], variables):
            found.append((render(str(module["enabled"]), variables), render(str(module["state"]), variables)))
    return found


def test_timers_not_enabled_are_stopped_and_disabled() -> None:
    """The role's README: the backup controller sets slurm_harp_timers_enabled: false to train on one
    host only. Before, that skipped the enabling alone, and timers a first run had enabled ran on."""
    on = _timer_tasks(role_vars(ansible_check_mode=False, slurm_harp_timers_enabled=True))
    off = _timer_tasks(role_vars(ansible_check_mode=False, slurm_harp_timers_enabled=False))
    assert [(str(e), s) for e, s in on] == [("True", "started")]
    assert [(str(e), s) for e, s in off] == [("False", "stopped")]


@pytest.mark.parametrize(
    ("config", "quota"),
    [({}, "100%"), ({"training": {"trees": 50}}, "100%"), ({"training": {"threads": 2}}, "200%")],
)
def test_the_nightly_units_cpu_quota_is_its_training_threads(config: dict[str, Any], quota: str) -> None:
    """CPUQuota= keeps the nightly's training from starving slurmctld on the controller: one CPU per
    LightGBM thread that harp.toml gives it (training.threads), no more."""
    lines = _unit("slurm-harp-nightly.service", _unit_vars(slurm_harp_config=config))
    assert [line for line in lines if line.startswith("CPUQuota=")] == [f"CPUQuota={quota}"]
    guide = " ".join((REPO / "docs" / "install.md").read_text().split())
    assert "`CPUQuota=100%`" in guide and "`CPUQuota=200%`" in guide  # documented, with the role's way


# --- by hand: what install.md says of what the role installs -------------------------------------


def _install_guide_section(title: str) -> str:
    guide = (REPO / "docs" / "install.md").read_text()
    return " ".join(guide.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0].split())


def test_uninstalling_by_hand_removes_all_the_role_installs() -> None:
    """The list named five directories and the user: the units and their drop-in, the guard's state,
    the documentation, the plugin's files next to slurm.conf and the group stayed, and so did the
    harp.disable of step 1: a later install ran with the plugin switched off."""
    variables = _unit_vars()

    def value(name: str) -> str:
        return str(render(f"{{{{ {name} }}}}", variables))

    steps = _install_guide_section("Uninstalling")
    units_dir = value("slurm_harp_systemd_dir")
    units = [*render("{{ __slurm_harp_units }}", variables), value("__slurm_harp_advice_dropin_dir")]
    assert all(u.removeprefix(units_dir + "/").startswith("slurm-harp") for u in units), units
    [guard_state] = [
        line.removeprefix("StateDirectory=")
        for line in _unit("slurm-harp-guard.service", variables)
        if line.startswith("StateDirectory=")
    ]
    lua_top = value("slurm_harp_lua_dir").removesuffix("/lua")
    named = [
        f"`{units_dir}/slurm-harp*`",
        "`slurm-harp.service.d/`",
        "`systemctl daemon-reload`",
        *(f"`{value(v)}`" for v in ("slurm_harp_venv_dir", "slurm_harp_config_dir", "slurm_harp_state_dir")),
        f"`/var/lib/{guard_state}`",
        f"`{lua_top}`",
        f"`{value('slurm_harp_doc_dir')}`",
        "next to `slurm.conf` `harp_plugin.lua` and `job_submit.lua`",
        f"`userdel {value('slurm_harp_user')}`",
        f"`groupdel {value('slurm_harp_group')}`",
        f"Last, remove `{value('slurm_harp_disable_file')}`",
    ]
    assert [n for n in named if n not in steps] == []


def test_installing_by_hand_gives_the_units_slurmuser_and_its_group_as_the_role_does() -> None:
    """The shipped units spell SlurmUser, its group and harp.toml's `slurm`, which the role's templates
    take from slurm.conf. install.md had a site copy them as they were: where SlurmUser is root, the
    guard ran as slurm (no operator: it could extend no job) and the units' group could not read
    harp.toml. The step says to set them with a drop-in, to what the role sets."""
    step = _install_guide_section("Install by hand")
    # Where SlurmUser is root, the preflight notes its group, root (the guard's), and the socket's,
    # harp.toml's, the role's own (the other units'); the step said Group=slurm-harp for the guard.
    root = _group_facts("root", 0, "root", 0) | {"role_path": str(ROLE)}
    overridden = []
    for shipped in sorted((REPO / "deploy" / "systemd").glob("*.service")):
        for key in ("User", "Group"):
            [as_shipped] = unit_values(shipped.read_text(), key)
            [as_role] = unit_values("\n".join(_unit(shipped.name, root)), key)
            if as_shipped != as_role:  # SlurmUser's, its group or harp.toml's group: the site's own
                overridden.append(f"{shipped.name} {key}={as_role}")
                assert f"`{key}={as_shipped}`" in step and f"{key}={as_role}" in step, (shipped.name, key)
    assert {"slurm-harp-guard.service User=root", "slurm-harp-guard.service Group=root"} <= set(overridden)
    # The drop-in gives the guard what the role's unit does, the group that reads the state too.
    guard_drop_in = step.split("`systemctl edit slurm-harp-guard`", 1)[1].split("```", 2)[1]
    role_guard = "\n".join(_unit("slurm-harp-guard.service", root))
    said = [f"{key}={value}" for key in GUARD_CREDENTIALS for value in unit_values(role_guard, key)]
    assert said == ["User=root", "Group=root", "SupplementaryGroups=slurm-harp"]
    assert guard_drop_in.split()[2:] == said, guard_drop_in  # after "ini [Service]"


GUARD_CREDENTIALS = ("User", "Group", "SupplementaryGroups")


@pytest.mark.parametrize(
    ("facts", "supplementary"),
    [
        # SlurmUser root: Group=root, which the state directory (slurm-harp's group, 0750) shuts out.
        (("root", 0, "root", 0), ["slurm-harp"]),
        (("slurm", 64030, "slurm", 64030), []),  # Group= is the state's group already
    ],
    ids=["root", "slurm"],
)
def test_the_guard_unit_is_given_the_group_that_reads_the_state_directory(
    facts: tuple[str, int, str, int], supplementary: list[str]
) -> None:
    """The guard reads the conditional extension's history in the state directory by harp.toml's
    group. Where SlurmUser is root, the unit said Group=root and CapabilityBoundingSet= (no
    CAP_DAC_OVERRIDE): permission denied, and the default `conditional` extension was steps only."""
    variables = _group_facts(*facts) | {"role_path": str(ROLE)}
    state_group = render("{{ __slurm_harp_socket_group }}", variables)
    unit = "\n".join(_unit("slurm-harp-guard.service", variables))
    assert unit_values(unit, "SupplementaryGroups") == supplementary
    assert state_group in unit_values(unit, "Group") + supplementary
    state_dir = task("tasks/config.yml", "Create the state directory (job store and models)")
    made = state_dir["ansible.builtin.file"]
    assert (render(made["group"], variables), made["mode"]) == (state_group, "0750")
    assert unit_values(unit, "CapabilityBoundingSet") == [""]  # root reads by the mode alone


def unit_values(text: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def test_upgrading_by_hand_copies_the_plugin_the_wheel_lacks() -> None:
    """The wheel carries no Lua (pyproject.toml's package-data): installing it alone left the old
    plugin running for ever. The role copies plugin/ at each run; by hand, install.md says to."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packed = project["tool"]["setuptools"]["package-data"]["slurm_harp"]
    assert not [p for p in packed if "lua" in p]
    steps = _install_guide_section("Upgrading")
    variables = role_vars()
    lua = str(render("{{ slurm_harp_lua_dir }}", variables))
    job_submit = str(render("{{ __slurm_harp_job_submit }}", variables))
    for said in (f"`plugin/harp/` to `{lua}/harp/`", "`plugin/job_submit.lua` next to `slurm.conf`"):
        assert said in steps
    assert f"`touch {job_submit}`" in steps


# --- the directories the role makes harp's own ----------------------------------------------------

OWN_DIRS_TASK = "Check that the directories the role makes harp's own are no shared ones"


def _shared_dir_refusals(**overrides: Any) -> list[str]:
    """The preflight's messages for the directories it refuses over ``overrides``."""
    check = task("tasks/preflight.yml", OWN_DIRS_TASK)["ansible.builtin.assert"]
    variables = role_vars(**overrides)
    said = []
    for item in render("{{ __slurm_harp_own_dirs }}", variables):
        if not render(f"{{{{ {check['that']} }}}}", variables | {"item": item}):
            said.append(" ".join(str(render(check["fail_msg"], variables | {"item": item})).split()))
    return said


@pytest.mark.parametrize(
    ("variable", "value", "shared"),
    [
        ("slurm_harp_socket", "/run/harp.sock", "/run"),
        ("slurm_harp_socket", "/var/run/harp.sock", "/var/run"),
        ("slurm_harp_socket", "/tmp/harp.sock", "/tmp"),
        ("slurm_harp_socket", "/var/tmp/harp.sock", "/var/tmp"),
        ("slurm_harp_socket", "/harp.sock", "/"),
        ("slurm_harp_state_dir", "/var/lib", "/var/lib"),
        ("slurm_harp_state_dir", "/", "/"),
        ("slurm_harp_config_dir", "/etc", "/etc"),
        ("slurm_harp_config_dir", "/etc/slurm", "/etc/slurm"),  # slurm.conf's, which every client reads
        ("slurm_harp_venv_dir", "/usr/local", "/usr/local"),
    ],
)
def test_a_shared_system_directory_is_refused_for_harp_s_own(variable: str, value: str, shared: str) -> None:
    """The role sets the owner, group and mode of the socket's, the state's, the configuration's and
    the virtualenv's directory: for `slurm_harp_socket: /run/harp.sock` it made /run slurm-harp's,
    0750 (every other daemon lost it), and /tmp lost its sticky bit."""
    [said] = _shared_dir_refusals(**{variable: value})
    like = {
        "slurm_harp_socket": "/run/slurm-harp/harp.sock",
        "slurm_harp_state_dir": "/var/lib/slurm-harp",
        "slurm_harp_config_dir": "/etc/slurm-harp",
        "slurm_harp_venv_dir": "/opt/slurm-harp",
    }[variable]
    into, directly = ("in ", "directly in ") if variable == "slurm_harp_socket" else ("", "")
    assert said.startswith(
        f"{variable} must be {into}a directory of harp's own, such as {like}, not {directly}{shared}: "
        "the role sets that directory's owner, group and mode for harp"
    ), said
    assert said.endswith(" (its sticky bit)") == (shared in ("/tmp", "/var/tmp"))


def test_the_default_directories_and_one_of_harp_s_own_anywhere_are_accepted() -> None:
    assert _shared_dir_refusals() == []
    assert _shared_dir_refusals(slurm_harp_socket="/var/run/slurm-harp/harp.sock") == []
    assert (
        _shared_dir_refusals(slurm_harp_socket="/srv/harp/harp.sock", slurm_harp_state_dir="/srv/harp") == []
    )


SYSTEMD_TAKES = "systemd makes the socket directory /run/"


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        # Under /run (or /var/run, its link) the socket's directory is the RuntimeDirectory=: systemd
        # owns it (0750) and removes it when slurm-harp stops. /run/lock lost its 1777 and went.
        ("slurm_harp_socket", "/var/run/lock/harp.sock", SYSTEMD_TAKES + "lock (RuntimeDirectory=lock)"),
        ("slurm_harp_socket", "/run/lock/harp.sock", SYSTEMD_TAKES + "lock (RuntimeDirectory=lock)"),
        ("slurm_harp_socket", "/var/run/user/harp.sock", SYSTEMD_TAKES + "user (RuntimeDirectory=user)"),
        ("slurm_harp_socket", "/run/shm/harp.sock", SYSTEMD_TAKES + "shm (RuntimeDirectory=shm)"),
        ("slurm_harp_socket", "/run/slurm/harp.sock", SYSTEMD_TAKES + "slurm (RuntimeDirectory=slurm)"),
        ("slurm_harp_socket", "/run/slurmctld/harp.sock", "RuntimeDirectory=slurmctld"),
        ("slurm_harp_socket", "/run/slurm/harp/harp.sock", "RuntimeDirectory=slurm/harp"),
        # Under /var/lib the state's is the StateDirectory=: systemd gives it, and all in it, to
        # slurm-harp at each start: slurmctld's state would have been slurm-harp's.
        ("slurm_harp_state_dir", "/var/lib/slurm", "makes /var/lib/slurm the StateDirectory= of the units"),
        ("slurm_harp_state_dir", "/var/lib/munge/", "the StateDirectory= of the units (munge)"),
        ("slurm_harp_state_dir", "/var/lib/systemd", "the StateDirectory= of the units (systemd)"),
        # Another daemon's, named for it, where the role makes the directory itself.
        ("slurm_harp_state_dir", "/var/spool/slurmctld", "a directory named slurm*, munge* or systemd*"),
        ("slurm_harp_socket", "/var/lib/slurm/harp.sock", "under /var/lib the first directory must be"),
        ("slurm_harp_config_dir", "/etc/munge", "a directory named slurm*, munge* or systemd*"),
        ("slurm_harp_venv_dir", "/opt/slurm/", "a directory named slurm*, munge* or systemd*"),
        # Shared by others.
        ("slurm_harp_config_dir", "/usr/local/etc", "programs that share /usr/local/etc rely on them"),
        ("slurm_harp_config_dir", "/etc/default", "programs that share /etc/default rely on them"),
        ("slurm_harp_config_dir", "/etc/sysconfig", "programs that share /etc/sysconfig rely on them"),
        ("slurm_harp_config_dir", "/etc/slurm/", "the other programs that share /etc/slurm/ rely on them"),
        ("slurm_harp_venv_dir", "/usr/local/", "the other programs that share /usr/local/ rely on them"),
        ("slurm_harp_socket", "/var/run/harp.sock", "not directly in /var/run"),
    ],
)
def test_a_directory_of_another_program_or_that_systemd_would_take_is_refused(
    variable: str, value: str, why: str
) -> None:
    """The role maps /var/run/X to RuntimeDirectory=X: `/var/run/lock/harp.sock` passed, and systemd
    would have owned /run/lock (0750) and removed it when slurm-harp stopped; `/var/lib/slurm` as the
    state made slurmctld's state slurm-harp's (StateDirectory= re-owns it all at each start)."""
    [said] = _shared_dir_refusals(**{variable: value})
    assert said.startswith(f"{variable} must be "), said
    assert "a directory of harp's own" in said and why in said, said


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("slurm_harp_socket", "/run/slurm-harp/harp.sock"),
        ("slurm_harp_socket", "/var/run/slurm-harp/harp.sock"),
        ("slurm_harp_socket", "/run/slurm-harp/sockets/harp.sock"),
        ("slurm_harp_state_dir", "/var/lib/slurm-harp"),
        ("slurm_harp_state_dir", "/var/lib/slurm-harp/"),
        ("slurm_harp_state_dir", "/var/spool/slurm-harp"),
        ("slurm_harp_venv_dir", "/opt/slurm-harp/"),
        ("slurm_harp_config_dir", "/etc/slurm-harp"),
        ("slurm_harp_config_dir", "/etc/slurm-harp/"),
    ],
)
def test_a_directory_named_for_harp_is_accepted(variable: str, value: str) -> None:
    assert _shared_dir_refusals(**{variable: value}) == []


PLAIN_PATH_TASK = "Check that every path is absolute and plain"


def _plain(key: str, path: str) -> bool:
    check = task("tasks/preflight.yml", PLAIN_PATH_TASK)["ansible.builtin.assert"]
    return bool(render(f"{{{{ {check['that']} }}}}", role_vars(item={"key": key, "value": path})))


@pytest.mark.parametrize(
    "path", ["/run//harp.sock", "/run/./harp.sock", "/run/x/../harp.sock", "/var/lib/", "/var/lib/.", "//tmp"]
)
def test_a_path_with_an_empty_dot_or_dot_dot_component_is_refused(path: str) -> None:
    """They are compared as text: `/run/./harp.sock` was a socket directly in /run by another name."""
    assert not _plain("slurm_harp_socket", path)
    for plain in ("/", "/run/slurm-harp/harp.sock", "/opt/.venv", "/a/..b", "/a/b.."):
        assert _plain("slurm_harp_socket", plain), plain


@pytest.mark.parametrize("path", ["/opt/slurm-harp/", "/etc/slurm/", "/var/lib/slurm-harp/", "/"])
def test_a_directory_may_end_in_one_slash(path: str) -> None:
    """As before the plain-path check: it refused them as an "empty component". One only; a file
    (the socket, the disable file) still may not."""
    assert _plain("slurm_harp_venv_dir", path)
    assert not _plain("slurm_harp_venv_dir", path + "/")
    assert not _plain("slurm_harp_socket", "/run/slurm-harp/harp.sock/")
    # The disable file next to slurm.conf stays a plain file path.
    variables = role_vars(slurm_harp_slurm_conf_dir="/etc/slurm/")
    assert render("{{ slurm_harp_disable_file }}", variables) == "/etc/slurm/harp.disable"


# --- names in harp.toml -----------------------------------------------------------------------------


def test_quoted_all_digit_names_are_written_to_harp_toml_as_given() -> None:
    """Quoted, an all-digit name is a string: harp.toml gets it as one, unconverted."""
    variables = _unit_vars(
        slurm_harp_policy_rules=[
            {"account": "2024001", "mode": "rewrite"},
            {"partition": "0123", "mode": "off"},
        ],
        slurm_harp_billing_partitions=[{"name": "1", "price": 2}],
        slurm_harp_advice_partitions=[{"name": "7", "gpu_memory_gb": 80}],
    )
    toml = render("{{ __slurm_harp_toml }}", variables)
    assert toml["policy"]["rule"] == variables["slurm_harp_policy_rules"]
    text = str(render((ROLE / "templates" / "harp.toml.j2").read_text(), variables))
    assert 'account = "2024001"' in text and 'partition = "0123"' in text and 'name = "7"' in text
    assert _values_refusals(**variables) == []


def test_the_daemon_on_the_guards_default_port_is_read_where_the_role_runs_no_guard() -> None:
    """The role writes [guard] metrics_port = 9818 whatever the mode and starts the guard only for
    time_min and extend: a site in shadow mode that had moved the daemon's endpoint to 9818 saw
    check-config, and every command, refuse the file. Where the guard runs, it is refused."""

    def harp_toml(**overrides: Any) -> dict[str, Any]:
        variables = _unit_vars(slurm_harp_metrics_port=9818, **overrides)
        return tomllib.loads(str(render((ROLE / "templates" / "harp.toml.j2").read_text(), variables)))

    shadow = harp_toml()
    assert shadow["server"]["metrics_port"] == shadow["guard"]["metrics_port"] == 9818
    assert not render("{{ slurm_harp_guard_enabled }}", _unit_vars(slurm_harp_metrics_port=9818))
    assert parse(shadow).guard.metrics_port == 9818
    with pytest.raises(ConfigError, match=r"guard\.metrics_port: 9818 is server\.metrics_port's port too"):
        parse(harp_toml(slurm_harp_policy_mode="extend"))


RULE_NAMES = "every partition and account in slurm_harp_policy_rules must be one name"


def _values_refusals(**overrides: Any) -> list[str]:
    """The messages of "Check the values a type cannot check" that fail over ``overrides``."""
    check = task("tasks/preflight.yml", "Check the values a type cannot check")
    variables = role_vars(**overrides)
    return [
        " ".join(str(render(item["msg"], variables)).split())
        for item in check["loop"]
        if not render(item["ok"], variables)
    ]


@pytest.mark.parametrize(
    ("rule", "got"),
    [
        ({"partition": "debug,short"}, '["debug,short"]'),
        ({"partition": ""}, '[""]'),
        ({"account": " phys"}, '[" phys"]'),
        ({"partition": "gpu", "account": "a\n"}, '["a\\n"]'),
    ],
)
def test_a_rule_name_no_job_can_match_stops_the_role_in_its_preflight(rule: dict[str, Any], got: str) -> None:
    """harp check-config refuses it, but at "Write harp.toml", after the role's first changes."""
    [said] = _values_refusals(slurm_harp_policy_rules=[{"mode": "off", **rule}])
    assert said.startswith(RULE_NAMES) and said.endswith(f"got {got}"), said


def test_rule_names_of_one_partition_or_account_pass_the_preflight() -> None:
    rules = [
        {"partition": "gpu", "mode": "off"},
        {"account": "2024001", "mode": "rewrite"},
        {"account": "a b", "mode": "off"},
    ]
    assert _values_refusals(slurm_harp_policy_rules=rules) == []


UNQUOTED = "every partition and account in slurm_harp_policy_rules and every name in"
RULES, BILLING, ADVICE = (
    "slurm_harp_policy_rules",
    "slurm_harp_billing_partitions",
    "slurm_harp_advice_partitions",
)


@pytest.mark.parametrize(
    ("overrides", "got"),
    [
        # YAML 1.1, as Ansible reads an inventory: 0123 is octal (83), 12:30 sexagesimal (750),
        # off a boolean, [gpu] a list, a blank a null. Each passed `type: str`, and the role's
        # `| string` wrote "83", "False", "['gpu']" or "None": rules and tables matching no job.
        ({RULES: [{"account": 83, "mode": "rewrite"}]}, f"{RULES}[0].account = 83"),
        (
            {RULES: [{"partition": "gpu", "mode": "off"}, {"partition": 750, "mode": "off"}]},
            f"{RULES}[1].partition = 750",
        ),
        ({RULES: [{"partition": False, "mode": "shadow"}]}, f"{RULES}[0].partition = false"),
        ({RULES: [{"partition": ["gpu"], "mode": "off"}]}, f'{RULES}[0].partition = ["gpu"]'),
        ({RULES: [{"partition": "gpu", "account": None, "mode": "off"}]}, f"{RULES}[0].account = null"),
        ({BILLING: [{"name": None, "price": 2.0}]}, f"{BILLING}[0].name = null"),
        ({BILLING: [{"name": 1, "price": 2.0}]}, f"{BILLING}[0].name = 1"),
        ({ADVICE: [{"name": ["a100"], "gpu_memory_gb": 80}]}, f'{ADVICE}[0].name = ["a100"]'),
        ({ADVICE: [{"name": True, "gpu_memory_gb": 80}]}, f"{ADVICE}[0].name = true"),
    ],
)
def test_a_name_that_is_not_a_string_stops_the_role_in_its_preflight(
    overrides: dict[str, Any], got: str
) -> None:
    """Refused, not converted: YAML has already changed an unquoted 0123 into 83."""
    said = [m for m in _values_refusals(**overrides) if m.startswith(UNQUOTED)]
    assert len(said) == 1, _values_refusals(**overrides)
    assert said[0].endswith(f"got {got}"), said
    assert 'quote it (account: "2024001"; YAML reads an unquoted 0123 as 83' in said[0]


def test_the_yaml_an_inventory_is_read_with_turns_these_names_into_no_strings() -> None:
    """The cases above, as Ansible's own YAML loader reads them from an inventory."""
    loader = pytest.importorskip("ansible.parsing.yaml.loader")
    inventory = "[{account: 0123}, {partition: 12:30}, {partition: off}, {partition: [gpu]}, {partition: }]"
    rules = yaml.load(inventory, Loader=loader.AnsibleLoader)
    assert [next(iter(r.values())) for r in rules] == [83, 750, False, ["gpu"], None]
    [said] = _values_refusals(slurm_harp_policy_rules=[{"mode": "off", **r} for r in rules])
    assert said.endswith(
        "got slurm_harp_policy_rules[0].account = 83, slurm_harp_policy_rules[1].partition = 750, "
        'slurm_harp_policy_rules[2].partition = false, slurm_harp_policy_rules[3].partition = ["gpu"], '
        "slurm_harp_policy_rules[4].partition = null"
    ), said


# --- the socket's mode ------------------------------------------------------------------------------

SOCKET_MODE_TASK = "Check that the socket's mode lets the socket group in and no one else"


@pytest.mark.parametrize("mode", ["0600", "0640", "0620", "0666", "0664", 0o660, "rw", "01660"])
def test_a_socket_mode_that_shuts_out_the_socket_group_stops_the_role_in_its_preflight(mode: Any) -> None:
    """`harp check-config` refused it, but at "Write harp.toml", after the user, the virtualenv and
    the directories had been made. An unquoted 0660 is YAML's number 432, which check-config refuses
    too (a mode is an octal string)."""
    facts = _group_facts("slurm", 64030, "slurm", 64030, slurm_harp_config={"server": {"socket_mode": mode}})
    said = _refusal(facts, SOCKET_MODE_TASK)
    assert said is not None and said.startswith(
        f"slurm_harp_config must not set server.socket_mode to {json.dumps(mode)}: the socket group slurm "
        "must be able to read and write the socket, which slurmctld opens by it as SlurmUser"
    ), said
    with pytest.raises(ConfigError, match=r"server\.socket_mode"):
        parse({"server": {"socket_group": "slurm", "socket_mode": mode}})


@pytest.mark.parametrize("mode", [None, "0660", "0670", "0770", "0o660", "660"])
def test_a_socket_mode_the_socket_group_may_use_passes_the_preflight(mode: str | None) -> None:
    config = {} if mode is None else {"server": {"socket_mode": mode}}
    facts = _group_facts("slurm", 64030, "slurm", 64030, slurm_harp_config=config)
    assert _refusal(facts, SOCKET_MODE_TASK) is None
    parse({"server": {"socket_group": "slurm", "socket_mode": mode or "0660"}})
