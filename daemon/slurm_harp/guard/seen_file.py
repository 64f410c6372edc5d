"""What `harp guard` saw of its jobs' limits (guard.lowered_limits), kept in a small file so that a
restarted guard goes on from there instead of taking each limit for the one its job started with;
and the time an `scontrol update` took it (guard.backlog), so that a restarted guard among many due
jobs starts them in time.

It lives in the guard's state directory (``[guard] state``; the unit's StateDirectory outlives a
restart, the heartbeat's runtime directory does not), written to a temporary name, fsync'd, then
renamed over it. At a busy site jobs come and go every poll, so it is not rewritten whenever what
it holds changed: at once when a job's own limit did (a lowering seen, a pending job raised above
the tag's own limit or a start above it, or one given up: a raise while pending, a start above the
limit last seen pending, a new run), otherwise at most once every SAVE_INTERVAL_S, and when the
guard stops.
What a crash loses is then only such an interval of jobs first seen, their highest limits and
states (run times are written with them, but alone never cause a write): a restarted guard takes
the limit it finds for one its job started with, and may extend the job up to its tag's own limit,
never stop it short of it.

A file that is missing, unreadable, not JSON or not of this format is logged and ignored: the guard
starts from what it sees, as it did before the file existed. So is each entry that does not read,
whatever it raises, a number out of range among them (NaN, infinite, past slurm_formats.in_range's,
but UNLIMITED). Nothing here stops a poll, nor the guard's start.

An entry is [submitted, restarts, pending, highest, limit, run time, lowered_to], under "jobs": the
form the guard of before raised_to (57dccab) reads, which drops any other entry whole, its lowering
with it (a list of another length; a lowering above the highest seen in a run). A guard rolled back
one version reads "format" and "jobs" only, so what it cannot read goes beside them:
- "raised": {job: raised_to}, of a run that has one (guard.lowered_limits). Such a guard takes the
  tag's own limit for that job, as it always did; so does this one with a value that does not read
  (logged, that value alone dropped: the entry and its lowering stay);
- "started_below": {job: [highest, limit, run time]}, of a run that started below the limit it was
  lowered to while pending (lowered_to above the run's highest). Its entry under "jobs" is then the
  pending spell it started from, [submitted, restarts, true, lowered_to + 1, lowered_to, 0,
  lowered_to]: such a guard reads the start again at its next poll and keeps the lowering, as if it
  had seen the job wait at it; so does this one with a value that does not read (logged, that value
  alone dropped).
- "raised_from": {job: raised_from}, of a run raised while the guard saw it (guard.lowered_limits).
  Without it (an older file, or an older guard's), or with a value that does not read (logged, that
  value and the job's raise_held_by dropped: the entry and its lowering stay), a second guard's
  extension landing late, or a slurmctld restart's, reads as a lowering, as it did before.
- "raise_held_by": {job: BOOT_TIME}, of a run whose raise a slurmctld was seen holding
  (guard.slurmctld_start). Without it (an older file), or with a value that does not read (logged,
  that value alone dropped: the entry and its lowering stay), the guard places the raise again when
  it next lists it; a drop to the limit before the raise until then is taken for a slurmctld
  restart's, not a lowering, and the job is extended again, never past a lowering kept. A guard
  rolled back reads every such drop as a lowering, as before.
- "update_seconds": the time one `scontrol update` took, once measured (guard.backlog). Without it,
  or with a number that is not one (logged), the guard starts from backlog.FIRST_GUESS_S.
This guard reads all five, and the 8-item entries (raised_to last) of its first version (30fc54b).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

from slurm_harp.guard.backlog import UpdateTimer
from slurm_harp.guard.lowered_limits import LoweredLimits, Seen
from slurm_harp.guard.running import UNLIMITED
from slurm_harp.guard.slurm import COMMAND_TIMEOUT_S
from slurm_harp.regular_file import NotJSON, TooLarge, read_json
from slurm_harp.slurm_formats import OutOfRange, in_range
from slurm_harp.state_dir import make_dirs, replace_file

log = logging.getLogger(__name__)

FORMAT = "harp-guard-limits/1"
# About 60 bytes a job: a file this large is not one of ours.
MAX_BYTES = 256 << 20
# The longest a change that may wait (anything but a job's own limit) goes unwritten.
SAVE_INTERVAL_S = 60.0
_UPDATE_KEY = "update_seconds"
_SIDES = ("raised", "started_below", "raised_from", "raise_held_by")  # beside "jobs" (the module's note)


class Saved(NamedTuple):
    seen: dict[str, Seen]
    update_s: float | None  # the time an update took the last guard; None: not known


class SeenFile:
    """When the guard's LoweredLimits, and the time its updates take, are written to ``path`` (see
    the module's note)."""

    def __init__(
        self, path: Path, clock: Callable[[], float] = time.monotonic, updates: UpdateTimer | None = None
    ) -> None:
        """``clock``: monotonic (on the wall clock, a step back of an hour wrote nothing for the hour)."""
        self.path = path
        self._clock = clock
        self._updates = updates
        self._written_at = -math.inf  # the last attempt: the first change after a start is written
        self._failed = False  # a failing write is logged once until one works again

    def load(self) -> dict[str, Seen]:
        """What the last guard saw; the time its updates took goes into ``updates``."""
        saved = read(self.path)
        if saved.update_s is not None and self._updates is not None:
            self._updates.restore(saved.update_s)
        return saved.seen

    def keep(self, limits: LoweredLimits) -> None:
        """After a poll: write at once when a job's own limit changed, else at most once an interval."""
        due = self._clock() - self._written_at >= SAVE_INTERVAL_S
        if limits.own_limit_changed or (limits.changed and due):
            self.write(limits)

    def write(self, limits: LoweredLimits) -> None:
        """Write ``limits`` if anything changed since the last write; a failure is logged (once)."""
        if not limits.changed:
            return
        self._written_at = self._clock()
        timer = self._updates
        measured = timer.seconds if timer is not None and (timer.measured or timer.restored) else None
        try:
            save(self.path, limits.seen, measured)
        except Exception as exc:  # whatever it raises: the poll, its extensions and heartbeat go on
            if not self._failed:
                log.error("could not write %s (a restarted guard forgets what this one saw): %s",
                          self.path, exc)  # fmt: skip
            self._failed = True
            return
        limits.changed = limits.own_limit_changed = self._failed = False


def load(path: Path) -> dict[str, Seen]:
    """The jobs the last guard saw; {} (logged) when there is no usable file."""
    return read(path).seen


def read(path: Path) -> Saved:
    """What the last guard saw and the time its updates took; nothing (logged) when there is no
    usable file."""
    nothing = Saved({}, None)
    try:
        body = read_json(path, MAX_BYTES)  # no FIFO, no link: a FIFO would hang the guard
    except FileNotFoundError:
        log.info("no %s: the guard starts from the jobs it sees", path)
        return nothing
    except OSError as exc:
        log.warning("%s unreadable, ignored: %s", path, exc)
        return nothing
    except TooLarge:
        body = None  # not of this format: said so below
    except NotJSON as exc:
        log.warning("%s is not JSON, ignored: %s", path, exc.reason)
        return nothing
    if (
        not isinstance(body, dict)
        or body.get("format") != FORMAT
        or not isinstance(body.get("jobs"), dict)
        or not all(isinstance(body.get(key, {}), dict) for key in _SIDES)
    ):
        log.warning("%s is not a %s file, ignored", path, FORMAT)
        return nothing
    return Saved(_jobs(path, body), _update_seconds(path, body.get(_UPDATE_KEY)))


def _jobs(path: Path, body: dict[str, Any]) -> dict[str, Seen]:
    """The entries of a file of this format that read; a value beside them that does not is dropped
    alone, the entry and its lowering kept (each counted, logged)."""
    sides = [body.get(key, {}) for key in _SIDES]
    seen: dict[str, Seen] = {}
    bad = dict.fromkeys(("jobs", *_SIDES), 0)
    for job, entry in body["jobs"].items():
        try:
            s = _entry(job, entry, sides, bad)
        except (
            Exception
        ) as exc:  # whatever a value no check foresaw raises: that entry alone, never the start
            if not bad["jobs"]:  # said once: a bug here would drop every entry, and their lowerings
                log.warning("%s: job %.40r does not read: %s: %s", path, job, type(exc).__name__, exc)
            s = None
        if s is None:
            bad["jobs"] += 1
        else:
            seen[job] = s
    for key, count in bad.items():
        if count:
            log.warning("%s: %d %s ignored%s", path, count, *_IGNORED[key])
    log.info("%s: %d jobs as the last guard saw them", path, len(seen))
    return seen


def _entry(job: str, entry: object, sides: list[dict[str, Any]], bad: dict[str, int]) -> Seen | None:
    """The file's entry of ``job`` with the values beside it (``sides``, as _SIDES) that read, each
    that does not counted in ``bad``; None when the entry itself does not read."""
    raised, started, raised_from, held_by = sides
    s = _listed(entry)
    if s is None:
        return None
    if started.get(job) is not None:
        # Without it, the pending spell the run started from: its start is read again, the lowering
        # kept (the module's note).
        run = _started(s, started[job])
        if run is None:
            bad["started_below"] += 1
        else:
            s = run
    if raised.get(job) is not None:
        # Without it, the tag's own limit, as an older guard takes it.
        if s.pending or s.raised_to is not None or not _count(raised[job]):
            bad["raised"] += 1
        else:
            s.raised_to = raised[job]
    below = raised_from.get(job)  # raised from below the highest seen in a run
    if below is not None and (s.pending or not _count(below) or below >= s.highest):
        # That value alone, its raise_held_by with it: the lowering stays. A drop is then read as
        # a lowering, as if the entry were dropped whole and the job first seen at its limit.
        bad["raised_from"] += 1
        return s
    s.raised_from = below
    held = held_by.get(job)
    if held is not None and (s.raised_from is None or not _count(held)):
        bad["raise_held_by"] += 1  # that value alone: the job's lowering stays (the module's note)
    elif held is not None:
        s.raise_held_by = held
    return s


# What a value that does not read is called, and what is done without it.
_IGNORED = {
    "jobs": ("entries that do not read", ""),
    "started_below": (
        "started_below values that do not read",
        ", their entries kept as the pending spell each started from: its start is read again",
    ),
    "raised": (
        "raised values that do not read",
        ", their entries kept: each job's limit is its tag's own, not the one it waited at",
    ),
    "raised_from": (
        "raised_from values that do not read",
        ", their entries kept: a drop from those raises is read as a lowering",
    ),
    "raise_held_by": (
        "raise_held_by values that do not read",
        ", their entries kept: each raise is placed again when next listed",
    ),
}


def _update_seconds(path: Path, value: object) -> float | None:
    """The time an update took the last guard, None when not given or not one (logged)."""
    if value is None:
        return None
    # As measured, at most an update's timeout (guard.slurm): a larger one is not ours.
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= COMMAND_TIMEOUT_S:
        return float(value)
    log.warning("%s: %s %.40r is no time an update takes, ignored", path, _UPDATE_KEY, value)
    return None


def save(path: Path, seen: Mapping[str, Seen], update_s: float | None = None) -> None:
    """Replace the file with ``seen`` and ``update_s`` (None: not known); OSError when it cannot be
    written."""
    jobs: dict[str, list[object]] = {}
    raised: dict[str, int] = {}
    started: dict[str, list[float]] = {}
    raised_from: dict[str, int] = {}
    held_by: dict[str, int] = {}
    for job, s in seen.items():
        lowered = s.lowered_to
        if not s.pending and lowered is not None and lowered > s.highest:  # see the module's note
            jobs[job] = [s.submitted, s.restarts, True, lowered + 1, lowered, 0, lowered]
            started[job] = [s.highest, s.limit, s.elapsed_s]
        else:
            jobs[job] = [s.submitted, s.restarts, s.pending, s.highest, s.limit, s.elapsed_s, lowered]
        if s.raised_to is not None:
            raised[job] = s.raised_to
        if s.raised_from is not None:
            raised_from[job] = s.raised_from
        if s.raise_held_by is not None:
            held_by[job] = s.raise_held_by
    body: dict[str, object] = {"format": FORMAT, "jobs": jobs}
    sides = zip(_SIDES, (raised, started, raised_from, held_by), strict=True)
    body |= {key: m for key, m in sides if m}  # else as before
    if update_s is not None:
        body[_UPDATE_KEY] = update_s
    make_dirs(path.parent)
    replace_file(path, json.dumps(body, separators=(",", ":")).encode())


def _started(s: Seen, started: object) -> Seen | None:
    """The run that started below the lowering of the pending spell ``s`` (the module's note); None
    when ``started`` does not read as one."""
    if not (s.pending and s.lowered_to is not None and isinstance(started, list) and len(started) == 3):
        return None
    highest, limit, elapsed = started
    if not (_count(highest) and _count(limit) and _run_time(elapsed)):
        return None
    return Seen(s.submitted, s.restarts, False, highest, limit, float(elapsed), s.lowered_to)


def _listed(entry: object) -> Seen | None:
    if not isinstance(entry, list) or len(entry) not in (7, 8):
        return None
    submitted, restarts, pending, highest, limit, elapsed, lowered, *more = entry
    raised = more[0] if more else None
    counts = (restarts, highest, limit, *(n for n in (lowered, raised) if n is not None))
    if not (
        isinstance(submitted, str)
        and isinstance(pending, bool)
        and all(_count(n) for n in counts)
        and _run_time(elapsed)
        # While pending, lowered only below the highest seen, and never raised. In a run, either may
        # be anything: a job that starts below the limit it was lowered to while it waited (backfill
        # within time_min) holds a lowering above its run's highest (lowered_limits, its start).
        and (not pending or ((lowered is None or lowered < highest) and raised is None))
    ):
        return None
    return Seen(submitted, restarts, pending, highest, limit, float(elapsed), lowered, raised)


def _count(n: object) -> TypeGuard[int]:
    """A restart count, a slurmctld's start or a limit in minutes (UNLIMITED: none)."""
    return type(n) is int and (n == UNLIMITED or (n >= 0 and _in_range(n)))


def _run_time(n: object) -> TypeGuard[int | float]:
    return isinstance(n, int | float) and not isinstance(n, bool) and n >= 0 and _in_range(n)


def _in_range(n: int | float) -> bool:
    """Not NaN, infinite nor past Slurm's 64-bit numbers (slurm_formats.in_range): float() of a run
    time of 400 digits raised OverflowError out of the guard's start, at every start."""
    try:
        in_range(n, "a number in the state file")
    except OutOfRange:
        return False
    return True
