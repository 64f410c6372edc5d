"""The documentation stays true: its links resolve inside the repository, the configuration
reference lists every key with its real default, and every test it cites for a claim exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.config import ARRAY_TABLES, SCHEMA, parse
from slurm_harp.config.start_only import DAEMON_GUARD_KEYS, DAEMON_SECTIONS, GUARD_KEYS
from slurm_harp.core.request import Target
from tests.conftest import REPO

DOC_ROOTS = ("README.md", "CHANGELOG.md", "docs", "models", "benchmarks", "experiments", "plugin", "deploy")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def documents() -> list[Path]:
    found: list[Path] = []
    for root in DOC_ROOTS:
        path = REPO / root
        found += [path] if path.is_file() else sorted(path.rglob("*.md"))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = CODE_FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def links(path: Path) -> list[str]:
    text = CODE_FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return [m.group(1) or m.group(2) for m in LINK.finditer(text)]


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    for target in links(doc):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: allowed, not fetched
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (doc.parent / file_part).resolve() if file_part else doc
        assert resolved.is_relative_to(REPO), f"{doc.name}: {target} points outside the repository"
        assert resolved.exists(), f"{doc.relative_to(REPO)}: {target} does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), (
                f"{doc.relative_to(REPO)}: no heading #{anchor} in {file_part}"
            )


def reference_rows(section: str) -> dict[str, list[str]]:
    """The table under ``## section`` of docs/configuration.md: first column (unquoted) -> cells."""
    text = (REPO / "docs" / "configuration.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def schema_keys() -> set[str]:
    """Every leaf key of the configuration schema as a dotted name (tables of keys are sections; an
    array of tables is one row, its keys described there)."""
    keys = set()
    for section, names in SCHEMA.items():
        for name in names:
            dotted = f"{section}.{name}" if section else name
            if dotted not in SCHEMA and section not in ARRAY_TABLES:
                keys.add(dotted)
    return keys


def documented_default(cell: str) -> Any:
    cell = cell.strip("`")
    if cell in ("unset", "none"):
        return None
    if cell == "[]":
        return frozenset()
    if cell in ("true", "false"):
        return cell == "true"
    if cell.startswith('"') and cell.endswith('"'):
        return cell[1:-1]
    try:
        return float(cell)
    except ValueError:
        return cell


def actual_defaults() -> dict[str, Any]:
    s = parse({})
    p = s.policy
    values: dict[str, Any] = {
        **{f"server.{k}": getattr(s.server, k) for k in SCHEMA["server"]},
        **{f"history.{k}": getattr(s.history, k) for k in SCHEMA["history"]},
        **{f"training.{k}": getattr(s.training, k) for k in SCHEMA["training"]},
        **{f"guard.{k}": getattr(s.guard, k) for k in SCHEMA["guard"]},
        **{f"billing.{k}": getattr(s.billing, k) for k in SCHEMA["billing"] - {"partition"}},
        "server.socket_mode": f"{s.server.socket_mode:04o}",
        "store.path": s.store,
        "policy.mode": p.default_mode.value,
        "policy.limits": p.limits,
        "policy.quantile": p.quantile,
        "policy.min_gain": p.min_gain,
        "policy.require_history": p.require_history,
        "policy.opt_out_users": p.opt_out_users,
        "policy.opt_out_accounts": p.opt_out_accounts,
        "policy.floor.time_minutes": p.floors[Target.TIME],
        "policy.floor.memory_mb": p.floors[Target.MEMORY],
        "policy.floor.cpus": p.floors[Target.CPUS],
        "policy.rule": None,
        "billing.partition": None,
        "advice.socket": s.advice.socket,
        "advice.max_connections": s.advice.max_connections,
        "advice.gpu_memory_headroom": s.advice.gpu_memory_headroom,
        "advice.partition": None,
    }
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}


def test_the_configuration_reference_lists_every_key_with_its_default() -> None:
    rows = reference_rows("harp.toml")
    documented = set(rows) - ARRAY_TABLES
    assert documented == schema_keys(), "docs/configuration.md and config.SCHEMA disagree"
    actual = actual_defaults()
    for key, cells in rows.items():
        want, got = documented_default(cells[1]), actual[key]
        if isinstance(got, bool) or got is None or isinstance(got, frozenset):
            assert want == got, f"{key}: documented {cells[1]}, is {got!r}"
        elif isinstance(got, int | float):
            assert want == float(got), f"{key}: documented {cells[1]}, is {got!r}"
        else:
            assert want == str(got), f"{key}: documented {cells[1]}, is {got!r}"


def test_the_plugin_reference_lists_every_key_with_its_default() -> None:
    source = (REPO / "plugin" / "job_submit.lua").read_text()
    block = source.split("local DEFAULTS = {", 1)[1].split("}", 1)[0]
    defaults = dict(re.findall(r"(\w+)\s*=\s*\"?([^\",\n]+)\"?,", block))
    rows = reference_rows("harp_plugin.lua")
    assert {k: v[0].strip("`") for k, v in rows.items()} == defaults


def test_the_plugin_readme_lists_every_module_of_harp() -> None:
    readme = (REPO / "plugin" / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.]+\.lua)` \|", readme, re.M))
    modules = {p.name for p in (REPO / "plugin" / "harp").glob("*.lua")}
    assert modules - listed == set()


def test_the_architecture_names_every_module_of_the_packages_it_lists_module_by_module() -> None:
    """The server, guard and configuration rows name each module; the commands row each module
    that is not a subcommand's own (one that adds a parser). A module added without its line is one
    a newcomer cannot find."""
    rows = [
        line for line in (REPO / "docs" / "architecture.md").read_text().splitlines() if line.startswith("| ")
    ]
    package = REPO / "daemon" / "slurm_harp"
    for name in ("server", "guard", "config", "commands"):
        named = " ".join(row for row in rows if f"`{name}/`" in row)
        modules = {
            p.name
            for p in (package / name).glob("*.py")
            if p.name != "__init__.py" and not (name == "commands" and "add_parser(" in p.read_text())
        }
        assert {m for m in modules if f"`{m}`" not in named} == set(), name


def test_the_sample_configuration_parses() -> None:
    from slurm_harp.config import load

    load(REPO / "deploy" / "config" / "harp.toml")


def _sections(text: str) -> set[str]:
    return set(re.findall(r"\[(\w+)\]", text))


def _keys(text: str) -> set[str]:
    return set(re.findall(r"\bguard\.\w+", text))


def test_the_sample_configuration_and_the_reference_say_what_a_reload_applies() -> None:
    """deploy/config/harp.toml's header and docs/configuration.md name the sections `harp serve`
    re-reads on SIGHUP and those it keeps until a restart, as Daemon.reload keeps them."""
    restart = set(DAEMON_SECTIONS)
    tables = {name for name in SCHEMA if name and "." not in name}
    # [training]: read by each `harp nightly`; [guard]: the guard's, of which the daemon reads a few keys
    applied = tables - restart - {"training", "guard"}
    assert restart and applied >= {"store", "policy", "billing"}
    guard_keys = {f"guard.{key}" for key in DAEMON_GUARD_KEYS}
    header = (REPO / "deploy" / "config" / "harp.toml").read_text().split("\n\n")[0]
    said = re.search(r"re-reads (.*?); (.*?) needs? a restart", " ".join(header.replace("#", "").split()))
    assert said, "harp.toml's header no longer says what a reload applies"
    assert (_sections(said.group(1)), _sections(said.group(2))) == (applied, restart)
    assert _keys(said.group(2)) == guard_keys
    # The guard keeps its metrics endpoint (GUARD_KEYS) until a restart, and reloads the rest.
    assert GUARD_KEYS == ("metrics_address", "metrics_port")
    assert "`harp guard` reloads [guard] itself but for its metrics endpoint" in " ".join(
        header.replace("#", "").split()
    )
    reference = " ".join((REPO / "docs" / "configuration.md").read_text().split())
    said = re.search(r"`harp serve` applies (.*?) changes at once; (.*?), after a restart", reference)
    assert said and (_sections(said.group(1)), _sections(said.group(2))) == (applied, restart)
    assert _keys(said.group(2)) == guard_keys


# README.md and docs/: their claims cite the tests that show them, and their commands are harp's
# (test_docs_commands.py): every document there, guard.md and benchmarks.md included.
CLAIM_DOCS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *(REPO / d / "README.md" for d in ("plugin", "models", "deploy/ansible")),
]
# `tests/f.py::name`, `::name`, `test_f.py`, and a parametrised case `::name[its id]`.
PY_CITE = re.compile(r"`((?:tests/)?[\w/]*test_\w+\.py)?(?:::(\w+)(?:\[([^\]`]+)\])?)?`")
LUA_CITE = re.compile(r"`(test_\w+\.lua)`|\"([^\"]+)\"")


def cited_python(path: Path) -> list[tuple[str, str | None]]:
    """(test file, test name or None) of every `tests/f.py::name`, `::name` (of the file before it in
    the same table cell or line) and `test_f.py` a document cites; a case's id is kept with its
    name, as `name[id]`."""
    found: list[tuple[str, str | None]] = []
    for cell in re.split(r"\||\n", path.read_text()):
        current = None
        for m in PY_CITE.finditer(cell):
            if m.group(1):
                current = m.group(1)
                found.append((current, None))
            if m.group(2):
                assert current, f"{path.name}: ::{m.group(2)} names no file"
                found.append((current, m.group(2) + (f"[{m.group(3)}]" if m.group(3) else "")))
    return found


def cited_lua(path: Path) -> list[tuple[str, str]]:
    """(Lua test file, the start of a test's name) of every `test_f.lua` "name" in a table cell."""
    found = []
    for cell in re.split(r"\||\n", path.read_text()):
        current = None
        for m in LUA_CITE.finditer(cell):
            current = m.group(1) or current
            if m.group(2) and current:
                found.append((current, m.group(2)))
    return found


def _defines(source: str, cited: str) -> bool:
    """Whether ``source`` defines the test ``cited`` (``name`` or ``name[id]``); an id must be in
    the file as a string (its ``ids=`` list or the mapping they are taken from)."""
    name, _, case = cited.partition("[")
    defined = re.search(rf"^(?:async )?def {name}\(", source, re.M) is not None
    return defined and (not case or f'"{case[:-1]}"' in source)


def test_a_cited_case_keeps_its_id() -> None:
    """The citation of a parametrised case was read as its file alone: neither name nor id checked."""
    cell = "`tests/integration/test_x.py::test_y[a case]`, `::test_z`"
    assert PY_CITE.findall(cell) == [("tests/integration/test_x.py", "test_y", "a case"), ("", "test_z", "")]
    assert _defines('def test_y(case):\n    ...\nIDS = ["a case"]\n', "test_y[a case]")
    assert not _defines("def test_y(case):\n", "test_y[a case]")


def test_the_docs_show_their_tests() -> None:
    assert (
        sum(len(cited_python(p)) for p in CLAIM_DOCS) > 100
        and sum(len(cited_lua(p)) for p in CLAIM_DOCS) > 10
    )


@pytest.mark.parametrize("doc", CLAIM_DOCS, ids=lambda p: p.name)
def test_every_test_the_docs_cite_exists(doc: Path) -> None:
    missing = []
    for file, name in cited_python(doc):
        path = (
            REPO / file if file.startswith("tests/") else next((REPO / "tests").rglob(Path(file).name), None)
        )
        if path is None or not path.is_file():
            missing.append(file)
        elif name and not _defines(path.read_text(), name):
            missing.append(f"{file}::{name}")
    for file, name in cited_lua(doc):
        names = re.findall(r'T\.test\("([^"]+)"', (REPO / "tests" / "lua" / file).read_text())
        if not any(name in test for test in names):
            missing.append(f'{file} "{name}"')
    assert not missing, f"{doc.name} cites tests that do not exist: {missing}"


def test_every_grpcurl_command_speaks_plain_grpc() -> None:
    """harp's sockets speak plain gRPC: without -plaintext grpcurl tries TLS and fails."""
    shown = [
        " ".join(c.split()) for doc in documents() for c in re.findall(r"`(grpcurl [^`]*)`", doc.read_text())
    ]
    assert len(shown) >= 2 and [c for c in shown if "-plaintext" not in c.split()] == [], shown


def checkout_installs() -> list[str]:
    """The commands the docs show that pip install a checkout (/path/to/slurm-harp), one line each."""
    return [
        " ".join(c.split())
        for doc in documents()
        for c in re.findall(r"`([^`]*pip install '?/path/to/slurm-harp[^`]*)`", doc.read_text())
    ]


def test_each_pip_install_of_a_checkout_removes_its_build_first() -> None:
    """pip builds in the checkout, and setuptools packs what build/lib holds from the last build: an
    upgrade installed modules deleted since again. tests/integration/test_install_by_hand.py runs them."""
    shown = checkout_installs()
    assert len(shown) == 2, shown  # install.md: install step 1, Upgrading
    clean_first = re.compile(r"(^|&& )rm -rf /path/to/slurm-harp/build && /opt/slurm-harp/bin/pip install ")
    assert [c for c in shown if not clean_first.search(c)] == [], shown


def section(doc: Path, start: str, end: str) -> str:
    """The text of ``doc`` from ``start`` to ``end``, on one line."""
    return " ".join(doc.read_text().split(start, 1)[1].split(end, 1)[0].split())


def test_uninstalling_removes_what_enabling_the_advice_hook_installs() -> None:
    """advice.md has sites copy cli_filter.lua and the modules, write harp_advice.lua, add
    CliFilterPlugins=lua and run a harp serve on login nodes; install.md's Uninstalling named none of
    them, and sbatch went on calling a hook whose daemon was gone."""
    enabling = section(REPO / "docs" / "advice.md", "**Enabling it**", "A site that has its own")
    uninstalling = section(REPO / "docs" / "install.md", "\n## Uninstalling\n", "\n## ")
    installed = [
        *re.findall(r"`[^`]+` to `([^`]+)`", enabling),  # Copy `plugin/x` to `y`
        *re.findall(r"Write `([^`]+)`", enabling),
        *re.findall(r"Add `([^`]+)`", enabling),
    ]
    assert {"cli_filter.lua", "harp_advice.lua", "CliFilterPlugins=lua"} <= set(installed), installed
    assert "`harp serve`" in enabling and "login node" in enabling
    # each is named, or a directory above it (/usr/share/slurm-harp for its lua/harp/)
    named = re.findall(r"`([^`]+)`", uninstalling)
    missing = [i for i in installed if not any(i == n or i.startswith(n.rstrip("/") + "/") for n in named)]
    assert missing == [] and "login node" in uninstalling and "`harp serve`" in uninstalling, missing


def test_the_sample_harp_toml_points_to_documents_that_hold_what_it_says() -> None:
    """deploy/config/harp.toml said "see the README" of ladder_rows and calibrate_by, which the README
    never names: each document (and anchor) it points to is there, and says the key."""
    sample = REPO / "deploy" / "config" / "harp.toml"
    for line in sample.read_text().splitlines():
        assert "see the README" not in line, line
    pointed = re.findall(r"\b((?:docs|experiments)/[\w./-]+\.md)(?:#([\w-]+))?", sample.read_text())
    assert ("docs/training.md", "train-harp-train") in pointed, pointed
    for path, anchor in pointed:
        assert (REPO / path).is_file(), path
        assert not anchor or anchor in anchors(REPO / path), f"{path}#{anchor}"
    training = (REPO / "docs" / "training.md").read_text()
    assert "training.ladder_rows" in training and "--calibrate-by" in training
