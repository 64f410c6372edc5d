"""Split `sacct -P` text into rows of fields, repairing what an unquoted format breaks.

sacct -P does not quote. A delimiter inside a free-text field (JobName, WorkDir, SubmitLine, a
comment) gives the row extra fields; a newline inside one splits the row over several lines.
- Extra fields: every way of giving them back to the free-text columns present is tried, and the
  row is kept only if exactly one candidate puts a valid value in every typed column (ids, states,
  numbers, sizes, times). UID on job lines and State on step lines anchor the candidates.
- Too few fields: the line is joined (with "\\n") to the next ones until the count is right, unless
  the next line is a valid row by itself; if the join overshoots and cannot be repaired, the first
  line is bad and the next is read on its own.
The delimiter is the one the caller gave sacct, or else the header's: "|" by default, or the ASCII
unit separator (--delimiter=$'\\x1f'). What harp runs sacct with itself is ``fresh_delimiter()``:
one no user can know when their job's name or work dir was set, so that no free text can widen a
row or hold a row of its own (a work dir "d\\n2001<delimiter>..." would otherwise be read as a job
of any user, with any harp tag).
A saved file read with its header's delimiter (`harp import`, `harp train --source FILE`) has no
such guard, and a row split over lines is not joined there: that line and every line after it are
bad (``_Splitter``'s comment says why), in one log line that says how to save a file that reads.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from slurm_harp.accounting.fields import parse_time
from slurm_harp.accounting.read_stats import ReadStats
from slurm_harp.slurm_formats import parse_count, parse_duration_s, parse_int, parse_size_mb, parse_tres

log = logging.getLogger(__name__)

UNIT_SEPARATOR = "\x1f"
# Columns users can put anything in.
FREE_TEXT = ("JobName", "WorkDir", "SubmitLine", "Comment", "AdminComment", "SystemComment", "Constraints")
# 123, 123_4, 123_[5-9%2], 123+0, each optionally followed by .batch / .extern / .0 ...
# re.ASCII: \d is any script's digit otherwise, and "١٠٤" was stored as a job apart from "104".
JOB_ID = re.compile(r"^(\d+)(_(?:\d+|\[[^\]]*\]))?(\+\d+)?(?:\.(\S+))?$", re.ASCII)
_STATE = re.compile(r"^[A-Z_]+(?: by \d+)?$", re.ASCII)
_EXIT = re.compile(r"^(?:\d+:\d+)?$", re.ASCII)
_MAX_JOINED_LINES = 50  # a row split by more newlines than this is given up as bad
# A row with more ways of giving its extra fields back than this is bad, not read from the first
# ones: the true reading could be past them and a shifted one (another user, UID 0) among them.
_MAX_CANDIDATES = 500


def _match(pattern: re.Pattern[str]) -> Callable[[str], object]:
    def check(text: str) -> object:
        if pattern.match(text.strip()) is None:
            raise ValueError(text)
        return True

    return check


_CHECKS: dict[str, Callable[[str], object]] = {
    "JobIDRaw": _match(JOB_ID),
    "JobID": _match(JOB_ID),
    "State": _match(_STATE),
    "ExitCode": _match(_EXIT),
    "Submit": parse_time,
    "Start": parse_time,
    "End": parse_time,
    "Eligible": parse_time,
    "ReqMem": lambda text: parse_size_mb(text, bare_unit="M"),
    "MaxRSS": lambda text: parse_size_mb(text, bare_unit=""),
    "TotalCPU": parse_duration_s,
    "ReqTRES": parse_tres,
    "AllocTRES": parse_tres,
    "UID": parse_int,
    "GID": parse_int,
    **dict.fromkeys(
        ("ElapsedRaw", "TimelimitRaw", "ReqCPUS", "AllocCPUS", "NNodes", "NTasks", "ReqNodes", "NCPUS"),
        parse_count,
    ),
}


@dataclass(frozen=True)
class Header:
    columns: dict[str, int]
    delimiter: str
    trailing: bool  # `sacct -p` ends every line, the header too, with the delimiter


def fresh_delimiter() -> str:
    """A delimiter for one sacct run: unit separators around 64 random bits (sacct takes a string)."""
    return f"{UNIT_SEPARATOR}{secrets.token_hex(8)}{UNIT_SEPARATOR}"


def parse_header(line: str, delimiter: str | None = None) -> Header:
    """``delimiter``: the one sacct was given (None: "|" or the unit separator, as the line holds)."""
    if delimiter is None:
        delimiter = UNIT_SEPARATOR if UNIT_SEPARATOR in line else "|"
    elif delimiter not in line:
        raise ValueError(f"not a sacct -P header delimited as asked: {line[:120]!r}")
    names = [name.strip() for name in line.split(delimiter)]
    trailing = len(names) > 1 and names[-1] == ""
    if trailing:
        names.pop()
    columns = {name: i for i, name in enumerate(names)}
    if len(columns) < len(names):  # a dict keeps one index per name: rows would be one field short
        repeated = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"sacct header repeats the column {', '.join(repeated)}: {line[:120]!r}")
    if "State" not in columns or "ElapsedRaw" not in columns:
        raise ValueError(f"not a sacct -P header (needs State and ElapsedRaw): {line[:120]!r}")
    if "JobIDRaw" not in columns and "JobID" not in columns:
        raise ValueError(f"not a sacct -P header (needs JobIDRaw or JobID): {line[:120]!r}")
    return Header(columns, delimiter, trailing)


Rows = Iterator[tuple[int, list[str]]]


def split_rows(
    lines: Iterable[str], stats: ReadStats, delimiter: str | None = None
) -> tuple[Header | None, Rows]:
    """Read the header, then yield (line number, fields) per row; bad rows go to ``stats``.
    ``delimiter``: the one sacct was given, which no user could know (None: read from the header,
    one any user may write: a row split over lines ends the rows read, ``_Splitter``)."""
    numbered = enumerate(lines, start=1)
    for _, raw in numbered:
        line = raw.rstrip("\r\n")
        if line.strip():
            header = parse_header(line, delimiter)
            return header, _Splitter(header, stats, joins=delimiter is not None).rows(numbered)
    return None, iter(())


# Why a saved file stops at a row split over lines. Its delimiter ("|", or the unit separator) is
# one any user may put in a job name or work dir, beside a newline. The lines after such a newline
# are the user's text until the field ends, and nothing tells where: "d\n<a whole row>" is a
# job name or work dir, or a row of its own; text ending a row early (the unchecked Flags column
# takes anything) leaves the lines after it to be read as rows; and a newline in JobName puts the
# user's text in User, UID and AdminComment of the row that is joined. Every reading the
# splitter could choose is one a user can forge, a job of another user with a harp tag of their
# choosing, so none is chosen: the row and every line after it are bad, counted, with one
# warning. A file saved with a delimiter no user knew when naming their job (as the harvest's)
# and given as ``delimiter`` is joined and repaired as sacct's output.
_SPLIT_IN_A_SAVED_FILE = (
    "a row split over lines (a newline in a job name, work dir or comment) in a file whose delimiter "
    "any user may write: no row from here on can be told from one a user wrote into that field, so "
    "this line and every line after it are bad. Save with `sacct --delimiter=<random>` and give the "
    "same to `harp import --delimiter`"
)


class _Splitter:
    def __init__(self, header: Header, stats: ReadStats, *, joins: bool = True) -> None:
        """``joins``: whether a row split over lines is joined (False: it ends the rows read)."""
        self.header = header
        self.width = len(header.columns)
        self.stats = stats
        self.joins = joins
        self.free = sorted(header.columns[name] for name in FREE_TEXT if name in header.columns)
        self.checks = [(i, _CHECKS[name]) for name, i in header.columns.items() if name in _CHECKS]

    def rows(self, numbered: Iterator[tuple[int, str]]) -> Rows:
        pending: tuple[int, str, int] | None = None  # (first line number, text so far, lines joined)
        for lineno, raw in numbered:
            line = raw.rstrip("\r\n")
            if not line.strip():
                if pending is not None:  # a blank line inside a multi-line field
                    pending = (pending[0], pending[1] + "\n" + line, pending[2] + 1)
                continue
            self.stats.lines += 1
            if pending is not None and not self.joins:
                self._stop(pending[0], pending[1], numbered)
                return
            if pending is not None:
                first, text, joined = pending
                pending = None
                # A line that is a valid row by itself starts a new row: else a truncated line
                # followed by a good one could pass for a single row with a long JobName.
                if not self._whole(line):
                    values = self._fields(text + "\n" + line)
                    if len(values) < self.width and joined < _MAX_JOINED_LINES:
                        pending = (first, text + "\n" + line, joined + 1)
                        continue
                    row = self._resolve(values)[0] if len(values) >= self.width else None
                    if row is not None:
                        yield first, row
                        continue
                self._short(first, text)
            values = self._fields(line)
            if len(values) < self.width:
                pending = (lineno, line, 1)
                continue
            row, reason = self._resolve(values)
            if row is None:
                self.stats.bad(lineno, reason, log)
            else:
                yield lineno, row
        if pending is not None:
            self._short(pending[0], pending[1])

    def _stop(self, first: int, text: str, numbered: Iterator[tuple[int, str]]) -> None:
        """Count the row split over lines at ``first`` and every line after it as bad (one
        warning for the row, one for the rest): the lines of a saved file that cannot be read."""
        self.stats.bad(
            first, f"{len(self._fields(text))} fields, header has {self.width}: {_SPLIT_IN_A_SAVED_FILE}", log
        )
        after = 1  # the line that came after the split one, counted by rows()
        for _, raw in numbered:
            if raw.strip():
                self.stats.lines += 1
                after += 1
        self.stats.bad_lines += after
        log.warning("%s: %d lines after line %d not read (above)", self.stats.source, after, first)

    def _whole(self, line: str) -> bool:
        values = self._fields(line)
        if len(values) == self.width:
            return self._plausible(values)
        return len(values) > self.width and self._resolve(values)[0] is not None

    def _short(self, lineno: int, text: str) -> None:
        self.stats.bad(lineno, f"{len(self._fields(text))} fields, header has {self.width}", log)

    def _fields(self, text: str) -> list[str]:
        values = text.split(self.header.delimiter)
        if self.header.trailing and len(values) > 1 and values[-1] == "":
            values.pop()
        return values

    def _resolve(self, values: list[str]) -> tuple[list[str] | None, str]:
        if len(values) == self.width:
            return values, ""
        ways = math.comb(len(self.free) + len(values) - self.width - 1, len(values) - self.width)
        if ways > _MAX_CANDIDATES:
            return None, (
                f"{len(values)} fields, header has {self.width}: too many delimiters in free text "
                f"({ways} readings, at most {_MAX_CANDIDATES} are tried)"
            )
        plausible = [c for c in self._candidates(values) if self._plausible(c)]
        if len(plausible) == 1:
            log.debug("repaired a row of %d fields: %r", len(values), plausible[0][:3])
            return plausible[0], ""
        if plausible:
            return None, f"{len(values)} fields, header has {self.width}: ambiguous delimiter in free text"
        return None, f"{len(values)} fields, header has {self.width}"

    def _candidates(self, values: list[str]) -> list[list[str]]:
        extra = len(values) - self.width
        out: list[list[str]] = []
        if not self.header.trailing and extra == 1 and values[-1] == "":
            out.append(values[:-1])  # sacct -p rows under a header that lost its trailing delimiter
        for cuts in itertools.combinations_with_replacement(self.free, extra):
            out.append(self._merge(values, cuts))
        unique = {tuple(c): c for c in out}
        return list(unique.values())

    def _merge(self, values: list[str], cuts: tuple[int, ...]) -> list[str]:
        """Give each free-text column at index i the extra fields named by i in ``cuts``."""
        merged: list[str] = []
        position = 0
        for column in range(self.width):
            take = 1 + cuts.count(column)
            merged.append(self.header.delimiter.join(values[position : position + take]))
            position += take
        return merged

    def _plausible(self, values: list[str]) -> bool:
        try:
            for index, check in self.checks:
                check(values[index])
        except (ValueError, KeyError):
            return False
        return True
