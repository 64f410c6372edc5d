"""What the commands share in reading their arguments: value types (each parses one value or
raises a message argparse shows) and the daemon's configuration file."""

from __future__ import annotations

import argparse
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from slurm_harp.config import DEFAULT_PATH, ConfigError, Settings, load

log = logging.getLogger(__name__)

Number = TypeVar("Number", int, float)


def _parsed(text: str, kind: Callable[[str], Number], ok: Callable[[Number], bool], rule: str) -> Number:
    try:
        value = kind(text)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}: {text!r}")
    return value


def foreign_link(out: Path) -> str | None:
    """Why ``out`` may not take a command's files (``--out DIR``), or None: a symbolic link owned
    by neither the caller nor root. Whoever owns it (a user, in a directory of theirs) could point
    it anywhere, and the files would land there, replacing those of the same names."""
    try:
        st = out.lstat()
    except OSError:
        return None  # nothing there yet, or the command's own error says why
    if stat.S_ISLNK(st.st_mode) and st.st_uid not in (0, os.geteuid()):
        return (
            f"{out} is a symbolic link owned by uid {st.st_uid}, not by you or root: "
            "give the directory it points to if that is meant"
        )
    return None


def fraction(text: str) -> float:
    """A fraction in [0, 1), e.g. a kill budget."""
    return _parsed(text, float, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)")


def count(text: str) -> int:
    """A whole number >= 1, e.g. a number of trees."""
    return _parsed(text, int, lambda v: v >= 1, ">= 1")


def rate(text: str) -> float:
    """A rate in (0, 1], e.g. a learning rate."""
    return _parsed(text, float, lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def config_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--config PATH`` (default: the daemon's usual path); ``what`` says what the file is."""
    parser.add_argument("--config", default=str(DEFAULT_PATH), help=f"{what} (default: %(default)s)")


def settings_at(path: str) -> Settings | None:
    """The configuration at ``path``, or None with the problem logged (the command exits 2)."""
    try:
        return load(path)
    except ConfigError as exc:
        log.error("%s", exc)
        return None
