"""Argument types shared by the commands: each parses one value or raises a message argparse shows."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

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


def fraction(text: str) -> float:
    """A fraction in [0, 1), e.g. a kill budget."""
    return _parsed(text, float, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)")


def count(text: str) -> int:
    """A whole number >= 1, e.g. a number of trees."""
    return _parsed(text, int, lambda v: v >= 1, ">= 1")


def rate(text: str) -> float:
    """A rate in (0, 1], e.g. a learning rate."""
    return _parsed(text, float, lambda v: 0.0 < v <= 1.0, "in (0, 1]")
