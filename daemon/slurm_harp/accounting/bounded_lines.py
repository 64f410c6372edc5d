"""The lines of a trace file, each read up to a cap: the SWF, CSV and saved sacct readers take
their lines from here.

Read whole, one line of 2 GiB (a 9 MB gzipped file) needed more than 2 GB of memory, or ended in
a MemoryError. A line longer than MAX_LINE is read a chunk at a time and dropped: a bad line,
counted and logged with its number and length, the reading going on after its newline.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Iterator

from slurm_harp.accounting.read_stats import ReadStats

log = logging.getLogger(__name__)

# Characters. Far above any line a trace holds: an SWF line is about 100, a sacct row holds at
# most slurmdbd's TEXT columns (SubmitLine, the comments, Constraints; 64 KB each), and the csv
# module refuses a field over 128 KB.
MAX_LINE = 1 << 20
_ENDS = ("\n", "\r")  # csv_trace reads with newline="": a line may end in "\r" alone


def bounded_lines(lines: Iterable[str], stats: ReadStats | None) -> Iterator[str]:
    """The lines of ``lines`` (a text file, read a chunk at a time, or any iterable of strings),
    each of at most MAX_LINE characters. A longer one is a bad line in ``stats`` (None: counted by
    no one, for a reader of the header alone) and comes as an empty line, which every reader
    skips: the lines after it keep their numbers."""
    read = _capped(lines) if isinstance(lines, io.TextIOBase) else (_length(line) for line in lines)
    for lineno, line in enumerate(read, start=1):
        if isinstance(line, str):
            yield line
            continue
        if stats is not None:
            stats.lines += 1
            stats.bad(lineno, f"a line of {line:,} characters, over the {MAX_LINE:,} a line may have", log)
        yield "\n"


def _capped(handle: io.TextIOBase) -> Iterator[str | int]:
    """Each line of ``handle``, or the length of one too long (its line end not counted), read no
    more than MAX_LINE + 1 characters at a time."""
    split_cr = False  # a read ended in "\r": a "\n" next is the rest of its "\r\n", cut by the cap
    while line := handle.readline(MAX_LINE + 1):
        if split_cr and line == "\n":  # under newline="" (csv_trace): no line of its own
            split_cr = False
            continue
        if len(line) <= MAX_LINE or line.endswith(_ENDS):
            split_cr = line.endswith("\r")
            yield line
            continue
        length = len(line)
        while line and not line.endswith(_ENDS):  # to its newline, or the end of the file
            line = handle.readline(MAX_LINE)
            length += len(line)
        split_cr = line.endswith("\r")
        yield length - (len(line) - len(line.rstrip("\r\n")))


def _length(line: str) -> str | int:
    """``line``, or its length when it is too long."""
    length = len(line.rstrip("\r\n"))
    return line if length <= MAX_LINE else length
