"""Text for a terminal: what users wrote (job names, accounts, scripts) shown, never obeyed.

An escape sequence in a job's account or name (ESC ] ... BEL sets an xterm's title; others move the
cursor, rewrite what is on screen, or in some terminals answer back into the input) would reach the
admin's terminal through `harp explain` or `harp advise` as the terminal's command. Every character
that is not printable is shown as a Python escape instead: ``\\x1b``, ``\\x9b``, ``\\u202e``, and a
newline inside one line of output as ``\\n``.
"""

from __future__ import annotations


def printable(line: str) -> str:
    """``line`` with each character that is not printable (C0 and C1 controls, DEL, format
    characters such as bidi overrides, lone surrogates, unassigned code points) escaped."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else _escape(c) for c in line)


def printable_lines(lines: list[str]) -> str:
    """The lines joined by newlines, each made printable."""
    return "\n".join(printable(line) for line in lines)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    if c in _SHORT:
        return _SHORT[c]
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
