"""Argument types shared by the commands: each parses one value or raises a message argparse shows."""

from __future__ import annotations

import argparse


def fraction(text: str) -> float:
    """A fraction in [0, 1), e.g. a kill budget."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1): {text!r}")
    return value
