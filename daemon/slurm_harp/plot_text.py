"""Text drawn in the plots of `harp evaluate`, `harp report` and `harp simulate`, as written.

matplotlib reads $...$ as mathematics, and fails on bad TeX: a trace's file name, a partition or a
predictions file may hold any text."""

from __future__ import annotations


def plain(text: str) -> str:
    """``text`` drawn as written."""
    return text.replace("$", r"\$")
