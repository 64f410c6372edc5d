"""Slurm host lists (``c[1-3,5],gpu01``) expanded into node names, as `scontrol show hostnames`
does, without a subprocess per list."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
# A list this long is not a real reservation or job: refuse rather than allocate without end.
MAX_NODES = 1_000_000


def expand(hostlist: str) -> set[str]:
    """The node names of ``hostlist``; ValueError when it does not parse."""
    names: set[str] = set()
    for item in _split_top(hostlist.strip()):
        if not item or item == "(null)":
            continue
        open_at = item.find("[")
        if open_at < 0:
            names.add(item)
            continue
        if not item.endswith("]"):
            raise ValueError(f"bad host list item {item[:60]!r}")
        prefix, body = item[:open_at], item[open_at + 1 : -1]
        for part in body.split(","):
            match = _RANGE.match(part)
            if match is None:
                raise ValueError(f"bad host range {part[:40]!r}")
            first, last = match[1], match[2] or match[1]
            if int(last) < int(first) or int(last) - int(first) + len(names) > MAX_NODES:
                raise ValueError(f"bad host range {part[:40]!r}")
            width = len(first) if first.startswith("0") else 0
            names.update(f"{prefix}{n:0{width}d}" for n in range(int(first), int(last) + 1))
    return names


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
