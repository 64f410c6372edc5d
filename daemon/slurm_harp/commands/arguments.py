"""What the commands share in reading their arguments: value types (each parses one value or
raises a message argparse shows), the daemon's configuration file and the ``--out`` directory."""

from __future__ import annotations

import argparse
import logging
import math
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, overload

from slurm_harp.config import DEFAULT_PATH, ConfigError, Settings, load
from slurm_harp.core.policy import Policy
from slurm_harp.output_dir import ForeignLink, OutputDir, WriteError
from slurm_harp.regular_file import refuse_non_regular

log = logging.getLogger(__name__)

Number = TypeVar("Number", int, float)


def _whole_number(text: str) -> int:
    """int() of ASCII digits, a sign allowed: int() alone also takes other scripts' digits, "4_000"
    and spaces."""
    if not (text.isascii() and text.removeprefix("+").removeprefix("-").isdigit()):
        raise ValueError(text)
    return int(text)  # past 4300 digits, a ValueError too


def _parsed(text: str, kind: Callable[[str], Number], ok: Callable[[Number], bool], rule: str) -> Number:
    try:
        value = kind(text)
    except ValueError:
        noun = "a whole number" if kind is _whole_number else "a number"
        raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}: {text!r}")
    return value


# The longest span of time an option may give: more is a slip of the keyboard (1e308 hours is past
# what a Unix time, sacct or SQLite can hold).
MAX_SPAN_S = 10 * 366 * 86400


def span(unit_s: int, *, zero: bool = False, least_s: int = 0) -> Callable[[str], float]:
    """A span of time counted in units of ``unit_s`` seconds: a finite number > 0 (>= 0 with
    ``zero``; at least ``least_s`` seconds when given) and at most ten years (MAX_SPAN_S)."""
    most = MAX_SPAN_S / unit_s
    if least_s:
        least = least_s / unit_s
        rule = f"at least {least:.4g} ({least_s} s) and at most {most:.0f} (ten years)"
        return lambda text: _parsed(text, float, lambda v: least <= v <= most, rule)
    rule = f"{'>= 0' if zero else '> 0'} and at most {most:.0f} (ten years)"
    return lambda text: _parsed(text, float, lambda v: (v >= 0 if zero else v > 0) and v <= most, rule)


def whole(text: str) -> int:
    """A whole number >= 0, e.g. seconds between passes (0: every time)."""
    return _parsed(text, _whole_number, lambda v: v >= 0, ">= 0")


def unix_time(at: datetime | float, text: str) -> int:
    """``at`` (a datetime, naive meaning local time, or Unix seconds; read from ``text``) in Unix
    seconds, or a message argparse shows: Slurm's times, sacct's and the job store's start at
    1970-01-01 UTC, and no job ended before."""
    try:
        seconds = at.timestamp() if isinstance(at, datetime) else at
    except (ValueError, OverflowError):  # year 1 in a zone east of UTC
        seconds = -1.0
    if not seconds >= 0:
        raise argparse.ArgumentTypeError(f"before 1970-01-01 UTC, when Slurm's times start: {text!r}")
    return int(seconds)


def input_problem(path: str) -> str | None:
    """Why the trace or job store at ``path`` cannot be read, or None. Only a regular file is read
    (regular_file, the wording of `harp demo --trace`): a FIFO would be waited on for good, and a
    pipe (`<(zcat t.swf)`, /dev/fd/63) would be read by the format its name says, sacct text, and
    an SWF's header read twice."""
    try:
        refuse_non_regular(path)
    except OSError as exc:  # NotRegularFile, or the path cannot be looked at
        return f"cannot read {path}: {exc}"
    return None if os.path.isfile(path) else f"{path}: no such file"


def extra_needed(exc: ImportError, what: str) -> str:
    """The line for a plotting library missing (matplotlib): it comes with the train extra."""
    return f"{exc.name or exc} is needed for {what}: pip install 'slurm-harp[train]'"


def open_out(out: Path) -> OutputDir | str:
    """``--out DIR`` made if missing and opened (slurm_harp.output_dir: a symbolic link on the
    way owned by neither the caller nor root is refused), or why not, naming the path."""
    try:
        return OutputDir.open(out)
    except ForeignLink as exc:
        return f"--out {exc}"
    except OSError as exc:
        return f"--out {exc.filename or out}: {exc.strerror or exc}"


@overload
def writing_out(
    out: Path, say: Callable[[str], object], work: Callable[[OutputDir], int], names: Sequence[str] = ()
) -> int: ...
@overload
def writing_out(
    out: Path | None,
    say: Callable[[str], object],
    work: Callable[[OutputDir | None], int],
    names: Sequence[str] = (),
) -> int: ...
def writing_out(
    out: Path | None, say: Callable[[str], object], work: Callable[[Any], int], names: Sequence[str] = ()
) -> int:
    """``work``'s exit status, given ``--out DIR`` opened (``open_out``; None without --out) and
    closing it after: the directories made for it that ``work`` left empty are removed again.
    2 if DIR cannot be opened or one of the ``names`` work will write is too long for it, which
    ``say`` says before anything is computed, or a file cannot be written there (no room, no
    permission), which ``say`` names."""
    if out is None:
        return work(None)
    opened = open_out(out)
    if isinstance(opened, str):
        say(opened)
        return 2
    with opened:
        if (problem := opened.too_long(names)) is not None:  # said after the work, before
            say(problem)
            return 2
        try:
            return work(opened)
        except WriteError as exc:
            say(str(exc))
            return 2


def fraction(text: str) -> float:
    """A fraction in [0, 1), e.g. a kill budget."""
    return _parsed(text, float, lambda v: 0.0 <= v < 1.0, "a fraction in [0, 1)")


def share(text: str) -> float:
    """A share in (0, 1), e.g. the last part of a trace held out."""
    return _parsed(text, float, lambda v: 0.0 < v < 1.0, "in (0, 1)")


def positive(text: str) -> float:
    """A finite number > 0, e.g. the smallest limit proposed."""
    return _parsed(text, float, lambda v: 0.0 < v < math.inf, "a finite number > 0")


def nonnegative(text: str) -> float:
    """A finite number >= 0, e.g. points of tolerance."""
    return _parsed(text, float, lambda v: 0.0 <= v < math.inf, "a finite number >= 0")


# The most a count option takes unless it says less: what a 32-bit int holds, as LightGBM's
# parameters and numpy's default integers do (a count past them ended in an overflow traceback).
MAX_WHOLE = 2**31 - 1


def count_to(most: int) -> Callable[[str], int]:
    """A whole number from 1 to ``most``, e.g. CPUs as Slurm holds them."""
    rule = f"a whole number from 1 to {most}"
    return lambda text: _parsed(text, _whole_number, lambda v: 1 <= v <= most, rule)


def count(text: str) -> int:
    """A whole number from 1 to MAX_WHOLE, e.g. a number of jobs."""
    return count_to(MAX_WHOLE)(text)


def seed(text: str) -> int:
    """A random seed, from 0 to MAX_WHOLE: scikit-learn takes 0 to 2**32 - 1, LightGBM a C int."""
    rule = f"a whole number from 0 to {MAX_WHOLE}"
    return _parsed(text, _whole_number, lambda v: 0 <= v <= MAX_WHOLE, rule)


def rate(text: str) -> float:
    """A rate in (0, 1], e.g. a learning rate."""
    return _parsed(text, float, lambda v: 0.0 < v <= 1.0, "in (0, 1]")


# A delimiter users could not have guessed when they named their jobs: the harvest's has 18
# characters (sacct_lines.fresh_delimiter); "|", "#" or "::" any user may write into a work dir.
MIN_DELIMITER = 8


def saved_delimiter(text: str) -> str:
    if len(text) < MIN_DELIMITER or "\n" in text or "\r" in text:
        raise argparse.ArgumentTypeError(
            f"must be the random string of at least {MIN_DELIMITER} characters, no newline, given to "
            f"sacct --delimiter (e.g. $(openssl rand -hex 8)), not {text[:40]!r}"
        )
    return text


def delimiter_option(parser: argparse.ArgumentParser) -> None:
    """--delimiter, for commands that read saved `sacct` text (harp import, harp train --source)."""
    parser.add_argument(
        "--delimiter",
        type=saved_delimiter,
        default=None,
        help="the random delimiter saved sacct text was written with (sacct --delimiter=...; at least "
        f"{MIN_DELIMITER} characters). Without it, a file split on '|' stops at the first row that "
        "spans lines (a newline in a job name or work dir), which any user could have forged",
    )


def warn_if_guessable(path: str, delimiter: str | None) -> None:
    """The warning for saved sacct text read without its random delimiter."""
    if delimiter is None and not path.lower().endswith((".swf", ".swf.gz", ".csv")):
        log.warning(
            "%s: saved sacct text split by its header's delimiter, which any user may write into a "
            "job name or work dir beside a newline: a row split over lines ends what is read, but "
            "rows laid out not to split cannot be told from real ones (docs/training.md). Where "
            "users are not trusted, save with sacct --delimiter=<random> and read it with --delimiter",
            path,
        )


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


def config_or_default(config: str | None) -> str | None:
    """``config`` when given, else the daemon's usual path when a file is there, else None (the
    caller uses harp's defaults): for commands whose --config is optional."""
    return config or (str(DEFAULT_PATH) if DEFAULT_PATH.is_file() else None)


def policy_at(config: str | None) -> tuple[Policy, str] | None:
    """(the policy of ``config``, or of the daemon's usual path when it exists, else harp's
    defaults; where it comes from); None when the configuration does not load (logged)."""
    path = config_or_default(config)
    if path is None:
        return Policy(), f"harp's defaults: no {DEFAULT_PATH}"
    settings = settings_at(path)
    return None if settings is None else (settings.policy, path)
