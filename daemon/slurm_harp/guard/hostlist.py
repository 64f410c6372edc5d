"""Slurm host lists (``c[1-3,5],gpu01``, ``n[1-2]-ib``, ``rack[1-2]-n[01-02]``) expanded into node
names, as `scontrol show hostnames` does, without a subprocess per list.

Text may follow a bracket group, and a name may hold several groups: Slurm's hostlist.c expands them
into every combination. A list that does not parse raises ValueError, and so does one of more than
MAX_NODES names, checked before any is made: the callers (guard.bounds) then take the list for
every node, on the side of a reservation bounding an extension.
"""

from __future__ import annotations

import itertools
import math
import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_GROUP = re.compile(r"(\[[^\[\]]*\])")
# A list this long is not a real reservation or job: refuse rather than allocate without end.
MAX_NODES = 1_000_000


def expand(hostlist: str) -> set[str]:
    """The node names of ``hostlist``; ValueError when it does not parse or names too many."""
    names: set[str] = set()
    for item in _split_top(hostlist.strip()):
        if item and item != "(null)":
            names.update(_expand_item(item, MAX_NODES - len(names)))
    return names


def _expand_item(item: str, room: int) -> list[str]:
    pieces = _GROUP.split(item)  # literal, [group], literal, [group], ..., literal
    literals, groups = pieces[0::2], [_ranges(p[1:-1]) for p in pieces[1::2]]
    if any("[" in text or "]" in text for text in literals):
        raise ValueError(f"bad host list item {item[:60]!r}")
    if math.prod(sum(last - first + 1 for first, last, _ in g) for g in groups) > room:
        raise ValueError(f"host list item {item[:60]!r}: more than {MAX_NODES} names")
    numbers = [[f"{n:0{w}d}" for first, last, w in g for n in range(first, last + 1)] for g in groups]
    return [
        "".join(lit + num for lit, num in zip(literals, (*combination, ""), strict=True))
        for combination in itertools.product(*numbers)
    ]


def _ranges(body: str) -> list[tuple[int, int, int]]:
    """The ranges of one bracket group (``1-3,5``, ``008-010``): (first, last, width of each name)."""
    out = []
    for part in body.split(","):
        match = _RANGE.match(part)
        if match is None or int(match[2] or match[1]) < int(match[1]):
            raise ValueError(f"bad host range {part[:40]!r}")
        first = match[1]
        out.append((int(first), int(match[2] or first), len(first) if first.startswith("0") else 0))
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items
