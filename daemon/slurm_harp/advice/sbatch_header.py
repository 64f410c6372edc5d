"""A batch script's directive lines split into words as sbatch splits them (Slurm 22.05,
``src/sbatch/opt.c``: ``_opt_batch_script`` and ``get_argument``), for ``harp advise --script``.

sbatch reads ``#SBATCH`` lines, and ``#SLURM`` lines (with a warning), up to the first line that is
neither blank nor a comment, and only up to the first ``hetjob`` (or ``packjob``) line: the first
component of a heterogeneous job, the one the cli_filter hook advises. In a line, a word ends at
unquoted white space; an unquoted, unescaped ``#`` ends the line (``-p short  # or -p long`` is
``-p short``; ``-J relax#2`` names the job ``relax``); ``"`` and ``'`` quote (a backslash escapes the
next character inside quotes too, and ``\\`` before white space escapes nothing: Slurm 24.05 made
``\\ `` a space); a word that comes out empty (``""``) ends the line, as do ``hetjob`` and
``packjob`` after the first word. sbatch refuses an unmatched quote and a word beginning with ``:``;
so does this, naming the line. The words of all lines are one argument list, as sbatch gives them to
getopt: an option's value may be the first word of the next line.
"""

from __future__ import annotations

__all__ = ["header_words"]

_SPACE = " \t\n\v\f\r"  # C isspace() in the C locale: a non-ASCII space is part of a word
_MAGIC = ("#SBATCH", "#SLURM")
_SEPARATORS = ("hetjob", "packjob")


def header_words(script: str) -> list[tuple[str, int]]:
    """(word, script line number) of the first component's directive lines, in order.
    ValueError names a line sbatch refuses."""
    out: list[tuple[str, int]] = []
    for number, line in enumerate(script.split("\n"), 1):
        line = line.split("\0", 1)[0]  # sbatch holds each line as a C string
        rest = next((line[len(m) :] for m in _MAGIC if line.startswith(m)), None)
        if rest is None:
            text = line.lstrip(_SPACE)
            if text and not text.startswith("#"):
                break  # the first command: the header is over
            continue
        if _separator(rest.lstrip(_SPACE)):
            break  # the next component's options start here: not this job's
        out += [(word, number) for word in _line_words(rest, number)]
    return out


def _separator(text: str) -> bool:
    """Whether ``text`` begins with ``hetjob`` or ``packjob`` (any case) as a word of its own."""
    return any(
        text[: len(s)].lower() == s and (len(text) == len(s) or text[len(s)] in _SPACE) for s in _SEPARATORS
    )


def _line_words(line: str, number: int) -> list[str]:
    words: list[str] = []
    at = 0
    while True:
        word, at = _word(line, at, number)
        if word is None:
            return words
        words.append(word)


def _word(line: str, at: int, number: int) -> tuple[str | None, int]:
    """The word at ``at`` and where reading stopped; None for none (the line is over for sbatch)."""
    while at < len(line) and line[at] in _SPACE:
        at += 1
    if _separator(line[at:]):
        return None, at  # sbatch blanks it out, and a blank word ends the line
    if line[at : at + 1] == ":":
        raise ValueError(f"script line {number}: a word begins with ':' (sbatch refuses it)")
    chars: list[str] = []
    quote = ""
    escaped = False
    while at < len(line) and (quote or line[at] not in _SPACE):
        char = line[at]
        at += 1
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
            continue
        elif quote:
            if char == quote:
                quote = ""
                continue
        elif char in "\"'":
            quote = char
            continue
        elif char == "#":
            return ("".join(chars) or None), len(line)  # the rest of the line is a comment
        chars.append(char)
    if quote:
        raise ValueError(f"script line {number}: unmatched {quote} (sbatch refuses it)")
    return ("".join(chars) or None), at
