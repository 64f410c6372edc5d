"""The `harp` commands the documentation shows are ones `harp` takes: every subcommand and option
named in README.md and docs/ exists, every value given to an option is one it accepts, every command
line in a code block parses whole, and the defaults the prose states are the parser's."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.cli import build_parser
from tests.conftest import REPO
from tests.unit.test_docs import CLAIM_DOCS

DOCS = CLAIM_DOCS
FENCE = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
# A command line in a code block: `harp SUB ...`, after a prompt, a path (/opt/.../bin/harp) or
# `runuser ... --`.
COMMAND_LINE = re.compile(r"^\s*(?:\$\s+)?(?:\S.*\s--\s+)?(?:\S*/)?harp\s+([a-z][a-z-]*)\b(.*)$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(\.\.\.)?$|^/path/")


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUB = subparsers()


def code_lines(text: str) -> Iterator[str]:
    """The lines of the fenced and indented (4 spaces, after a blank line) code blocks, a line
    ending in a backslash joined to the next."""
    blocks = [m.group(1) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    blocks += [m.group(0) for m in re.finditer(r"(?:(?<=\n\n)(?: {4}.*\n)+)", prose)]
    for block in blocks:
        yield from block.replace("\\\n", " ").splitlines()


def mentions(doc: Path) -> list[tuple[str, bool]]:
    """The `harp ...` texts of ``doc``, each with whether it is a whole command line of a code block."""
    text = doc.read_text()
    found = []
    for line in code_lines(text):
        m = COMMAND_LINE.match(line)
        if m and line.isascii():  # not a line of a diagram
            found.append((f"harp {m.group(1)}{m.group(2)}", True))
    for span in INLINE.findall(FENCE.sub("", text)):
        if re.match(r"harp [a-z]", span):
            found.append((span, False))
    return list(dict.fromkeys(found))


def words(text: str) -> list[str]:
    """The words of a mention, a synopsis's brackets and alternatives between options dropped."""
    text = re.sub(r"\|(?=--)", " ", text).replace(" | ", " ")
    return [w.strip("[]") for w in shlex.split(text, comments=True) if w.strip("[]")]


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def accepts(action: argparse.Action, value: str) -> bool:
    convert: Callable[[str], Any] = action.type if callable(action.type) else str
    try:
        converted = convert(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return action.choices is None or converted in action.choices


def problems(text: str) -> list[str]:
    """What in one `harp ...` text is not a command, option or value `harp` takes."""
    first, *rest = words(text)[1:]
    if first not in SUB:
        return [f"`harp {first}` is no harp command"]
    known, found = options(SUB[first]), []
    for i, word in enumerate(rest):
        if not word.startswith("--"):
            continue
        name, _, inline = word.partition("=")
        if name not in known:
            found.append(f"`harp {first}` has no option {name}")
            continue
        action = known[name]
        value = inline or (rest[i + 1] if i + 1 < len(rest) and not rest[i + 1].startswith("-") else "")
        if action.nargs == 0 or not value:
            continue
        found += [
            f"`harp {first} {name}` refuses {alternative!r}"
            for alternative in value.split("|")
            if not PLACEHOLDER.match(alternative) and not accepts(action, alternative)
        ]
    return found


def whole_line(text: str) -> bool:
    """A whole command, not a synopsis (brackets, alternatives, repetition)."""
    return not re.search(r"[\[|]|\.\.\.", text.partition("#")[0])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_command_option_and_value_the_docs_name_is_taken(doc: Path) -> None:
    found = mentions(doc)
    wrong = [f"{text}: {problem}" for text, _ in found for problem in problems(text)]
    assert not wrong, "\n".join(wrong)
    for text, whole in found:
        if whole and whole_line(text):
            try:
                build_parser().parse_args(words(text)[1:])
            except SystemExit as exc:
                raise AssertionError(f"{doc.name}: `{text}` does not parse") from exc


def test_the_docs_show_commands() -> None:
    found = [m for doc in DOCS for m in mentions(doc)]
    assert len(found) > 40 and sum(whole and whole_line(text) for text, whole in found) >= 8
    assert any(whole and text.startswith("harp nightly --config") for text, whole in found)  # runuser


def prose(name: str) -> str:
    """A document's text, its line breaks and runs of spaces made one space."""
    return re.sub(r"\s+", " ", (REPO / name).read_text())


def stated(name: str, pattern: str) -> str:
    found = re.search(pattern, prose(name))
    assert found, f"{name} no longer says {pattern!r}"
    return found.group(1)


def default(command: str, dest: str) -> Any:
    """The parser's default of ``dest``; ``split[1]`` is the second item of ``split``'s."""
    name, _, index = dest.partition("[")
    value = SUB[command].get_default(name)
    return value[int(index.rstrip("]"))] if index else value


def percent(text: str) -> float:
    return float(text) / 100


# (document, what it says with the value as group 1, command, its argument, the value as the parser has it)
DEFAULTS: list[tuple[str, str, str, str, Callable[[str], Any]]] = [
    ("README.md", r"The demo \(about \d+ s\) trains on the first (\d+) %", "demo", "holdout",
     lambda v: 1 - percent(v)),
    ("docs/training.md", r"\(`--overlap-minutes`, default (\d+)\)", "harvest", "overlap_minutes", float),
    ("docs/training.md", r"\(`--settle-seconds`, default (\d+):", "harvest", "settle_seconds", float),
    ("docs/training.md", r"`--kill-budget` \(default (\d+) % newly killed", "train", "kill_budget", percent),
    ("docs/training.md", r"`--tolerance` points \(default ([\d.]+)\)", "train", "tolerance", float),
    ("docs/training.md", r"\(`--refit (\w+)`, the default\)", "train", "refit", str),
    ("docs/simulation.md", r"every `--period-days` \((\d+)\)", "simulate", "period_days", float),
    ("docs/simulation.md", r"the model's `--quantile` \(([\d.]+)\)", "simulate", "quantile", float),
    ("docs/simulation.md", r"the first (\d+) % of jobs a warm-up", "simulate", "warmup", percent),
    ("docs/simulation.md", r"`--extension (\w+)` \(the default, as\s+the guard's\)", "simulate",
     "extension", str),
    ("docs/evaluation.md", r"the first (\d+) % of the jobs train", "evaluate", "split[0]", percent),
    ("docs/evaluation.md", r"the next (\d+) % \(validation\)", "evaluate", "split[1]", percent),
]  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "pattern", "command", "dest", "read"), DEFAULTS, ids=[d[3] for d in DEFAULTS]
)
def test_the_defaults_the_docs_state_are_the_commands(
    doc: str, pattern: str, command: str, dest: str, read: Callable[[str], Any]
) -> None:
    want, got = read(stated(doc, pattern)), default(command, dest)
    assert got == pytest.approx(want) if isinstance(want, float) else got == want, f"{doc}: {pattern}"


def test_the_config_file_the_docs_name_is_the_commands_default() -> None:
    path = stated("docs/configuration.md", r"`harp serve`, `harp guard` and `harp nightly` read `(\S+)`")
    for command in ("serve", "guard", "nightly"):
        assert default(command, "config") == path, command
