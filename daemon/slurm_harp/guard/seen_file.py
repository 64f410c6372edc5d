"""What `harp guard` saw of its jobs' limits (guard.lowered_limits), kept in a small file so that a
restarted guard goes on from there instead of taking each limit for the one its job started with.

It lives in the guard's state directory (``[guard] state``; the unit's StateDirectory outlives a
restart, the heartbeat's runtime directory does not). It is rewritten only when what it holds changed
(run times alone do not count), to a temporary name then renamed over it. A file that is missing,
unreadable, not JSON or not of this format is logged and ignored: the guard starts from what it sees,
as it did before the file existed. So is each entry that does not read. Nothing here stops a poll.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_harp.guard.lowered_limits import Seen
from slurm_harp.regular_file import read_regular
from slurm_harp.state_dir import make_dirs, replace_file

log = logging.getLogger(__name__)

FORMAT = "harp-guard-limits/1"
# About 60 bytes a job: a file this large is not one of ours.
MAX_BYTES = 256 << 20


def load(path: Path) -> dict[str, Seen]:
    """The jobs the last guard saw; {} (logged) when there is no usable file."""
    try:
        raw = read_regular(path, follow_links=False, size=MAX_BYTES + 1)  # a FIFO would hang the guard
    except FileNotFoundError:
        log.info("no %s: the guard starts from the jobs it sees", path)
        return {}
    except OSError as exc:
        log.warning("%s unreadable, ignored: %s", path, exc)
        return {}
    try:
        body: Any = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        log.warning("%s is not JSON, ignored: %s", path, exc)
        return {}
    if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("jobs"), dict):
        log.warning("%s is not a %s file, ignored", path, FORMAT)
        return {}
    seen, bad = {}, 0
    for job, entry in body["jobs"].items():
        s = _entry(entry)
        if s is None:
            bad += 1
        else:
            seen[job] = s
    if bad:
        log.warning("%s: %d entries that do not read ignored", path, bad)
    log.info("%s: %d jobs as the last guard saw them", path, len(seen))
    return seen


def save(path: Path, seen: Mapping[str, Seen]) -> None:
    """Replace the file with ``seen``; OSError when it cannot be written."""
    jobs = {
        job: [s.submitted, s.restarts, s.pending, s.highest, s.limit, s.elapsed_s, s.lowered_to]
        for job, s in seen.items()
    }
    make_dirs(path.parent)
    replace_file(path, json.dumps({"format": FORMAT, "jobs": jobs}, separators=(",", ":")).encode())


def _entry(entry: object) -> Seen | None:
    if not isinstance(entry, list) or len(entry) != 7:
        return None
    submitted, restarts, pending, highest, limit, elapsed, lowered = entry
    counts = (restarts, highest, limit) if lowered is None else (restarts, highest, limit, lowered)
    if not (
        isinstance(submitted, str)
        and isinstance(pending, bool)
        and all(type(n) is int and n >= 0 for n in counts)
        and type(elapsed) in (int, float)
        and elapsed >= 0
        and (lowered is None or lowered < highest)  # lowered only below the highest seen
    ):
        return None
    return Seen(submitted, restarts, pending, highest, limit, float(elapsed), lowered)
