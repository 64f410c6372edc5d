"""The role's booleans and integers given as text: an INI inventory's `[group:vars]` and `-e key=value`
give every value as a string, which the argument specs check (`type: bool` takes "false") but do not
convert. Each use converts them (`| bool`, `| int`), as tests/unit/test_deploy_role.py renders them."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from slurm_harp.config import parse
from tests.unit.test_deploy_role import ROLE, _unit_vars, render, runs

ADVICE_TASKS = (
    "Create the daemon's drop-in directory",
    "Install the advice drop-in (users may enter the socket's directory)",
)
NO_ADVICE_TASK = "Remove the advice drop-in (no advice socket)"


def _harp_toml(variables: dict[str, Any]) -> dict[str, Any]:
    return tomllib.loads(str(render((ROLE / "templates" / "harp.toml.j2").read_text(), variables)))


@pytest.mark.parametrize(
    ("given", "meant"),
    [("false", False), ("False", False), ("no", False), ("0", False), ("true", True), ("yes", True)],
)
def test_advice_given_as_text_is_on_or_off_as_it_says(given: str, meant: bool) -> None:
    """ "false" turned advice on: harp.toml got an advice socket and the socket's directory 0751,
    then ansible-core 2.19 stopped the play at the units' first `when:` (a condition of type str),
    after those changes; turning advice off so kept the old drop-in."""
    variables = _unit_vars(slurm_harp_advice_enabled=given)
    assert ("socket" in render("{{ __slurm_harp_toml.advice }}", variables)) is meant
    assert render("{{ __slurm_harp_socket_dir_mode }}", variables) == ("0751" if meant else "0750")
    assert [runs("tasks/units.yml", name, variables) for name in ADVICE_TASKS] == [meant, meant]
    assert runs("tasks/units.yml", NO_ADVICE_TASK, variables) is not meant
    assert ("advice" in _harp_toml(variables)) is meant


def test_ports_given_as_text_are_written_as_numbers() -> None:
    """metrics_port = "9900" was written, which `harp check-config` refused at "Write harp.toml",
    after the user and the virtualenv had been made."""
    variables = _unit_vars(slurm_harp_metrics_port="9900", slurm_harp_guard_metrics_port="9901")
    toml = _harp_toml(variables)
    assert (toml["server"]["metrics_port"], toml["guard"]["metrics_port"]) == (9900, 9901)
    settings = parse(toml, "harp.toml")
    assert (settings.server.metrics_port, settings.guard.metrics_port) == (9900, 9901)
    assert "server" in _harp_toml(_unit_vars(slurm_harp_metrics_port="0"))
    assert "metrics_port" not in _harp_toml(_unit_vars(slurm_harp_metrics_port="0"))["server"]


# (variable, task file, task, whether it runs where the variable is true)
WHENS = [
    ("slurm_harp_manage_services", "tasks/preflight.yml", "Find systemd", True),
    ("slurm_harp_manage_services", "handlers/main.yml", "Reload systemd", True),
    ("slurm_harp_install_job_submit", "tasks/plugin.yml", "Install job_submit.lua next to slurm.conf", True),
    (
        "slurm_harp_manage_slurm_conf",
        "tasks/preflight.yml",
        "Check that slurm.conf enables the plugin and stores job comments",
        False,  # only where the role does not edit slurm.conf itself
    ),
]


@pytest.mark.parametrize(("variable", "task_file", "name", "if_true"), WHENS)
def test_the_other_booleans_given_as_text_are_what_they_say(
    variable: str, task_file: str, name: str, if_true: bool
) -> None:
    """Each `when:` on a boolean the argument specs type: `slurm_harp_manage_services=false` (no
    systemd as PID 1) stopped the play there."""
    for given, meant in (("false", False), ("no", False), ("true", True)):
        variables = _unit_vars(**{variable: given}, ansible_check_mode=False)
        assert runs(task_file, name, variables) is (meant is if_true), (variable, given)


TYPED = ("bool", "int")


def _typed_variables() -> dict[str, str]:
    """{variable: its type} of the role's booleans and integers, as the argument specs type them."""
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    return {name: o["type"] for name, o in options.items() if o.get("type") in TYPED}


JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)
CONDITIONS = ("when", "that", "changed_when", "failed_when")


def _expressions(value: Any, key: str = "") -> Iterator[str]:
    """The Jinja expressions in a task file's value: a condition whole, else what {{ }} and {% %} hold."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _expressions(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _expressions(v, key)
    elif isinstance(value, str):
        if key in CONDITIONS:
            yield value
        else:
            yield from (a or b for a, b in JINJA.findall(value))


def _role_expressions() -> Iterator[tuple[str, str]]:
    for path in sorted(
        [*(ROLE / "tasks").glob("*.yml"), ROLE / "handlers" / "main.yml", ROLE / "vars" / "main.yml"]
    ):
        for expression in _expressions(yaml.safe_load(path.read_text())):
            yield str(path.relative_to(ROLE)), expression
    for path in sorted((ROLE / "templates").rglob("*.j2")):
        for a, b in JINJA.findall(path.read_text()):
            yield str(path.relative_to(ROLE)), a or b


def test_every_use_of_a_boolean_or_an_integer_converts_it() -> None:
    """The same defect anywhere else: a use without `| bool` (`| int`) takes "false" as true, writes
    "9900" to harp.toml as text, or stops ansible-core 2.19 at a `when:` mid-play."""
    typed = _typed_variables()
    assert set(typed) >= {
        "slurm_harp_advice_enabled",
        "slurm_harp_metrics_port",
        "slurm_harp_manage_services",
    }
    unconverted, converted = [], 0
    for where, expression in _role_expressions():
        for name, kind in typed.items():
            for use in re.finditer(rf"\b{name}\b(\s*\|\s*{kind}\b)?", expression):
                if use.group(1):
                    converted += 1
                else:
                    unconverted.append(f"{where}: {name} in {' '.join(expression.split())[:120]}")
    assert unconverted == []
    assert converted > 20  # the scan finds them
