"""A version's promotion verdict: the promotion.json beside its card, which learning.pipeline
writes and the daemon's fallback, `harp rollback` and retention read (through model.store) to
pass over a version promotion refused, never judged, whose verdict cannot be read, or that an
admin rolled back from or past (`harp rollback` adds that mark to the verdict).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from slurm_harp.model.card import PROMOTION_FILE
from slurm_harp.model.store_files import MAX_NOTE_BYTES, read_note
from slurm_harp.regular_file import NotJSON, TooLarge
from slurm_harp.state_dir import fsync_dir, replace_file

# The promotion.json a version published to be judged is born with (publish(awaiting_verdict=True)),
# until write replaces it. A crash, or a verdict that cannot be written and a version that cannot
# be removed then, leaves it: read as refused, such a version is never served by the daemon's
# fallback or `harp rollback` (it may be a challenger the verdict would have refused), and retention
# counts it with the refused ones.
PENDING_VERDICT = {"promote": False, "pending": True, "verdict": "not judged (no verdict written yet)"}
# read() of a promotion.json that is there but holds no verdict it can read (not JSON, cut short,
# not UTF-8, no true or false "promote", a FIFO): refused, as PENDING_VERDICT is. What it hides may
# be a refusal, and a challenger promotion refused must never be served by a fallback.
UNREADABLE = "unreadable"
# The key `harp rollback` adds to the verdict of each version it goes back past (the one it leaves
# and those between), the UTC time it did. Such a version counts as refused: the fallbacks (the
# daemon's at a start, a rollback without a version) served again what an admin had withdrawn once
# the version after it failed to load.
# A version without promotion.json gets one holding only the mark (no "promote": no verdict).
ROLLED_BACK = "rolled_back"

log = logging.getLogger(__name__)


def write(version_dir: Path, verdict: Mapping[str, Any]) -> None:
    """Give a published version its promotion verdict, atomically. The card and model files are
    never touched: they are what the checksums cover."""
    data = json.dumps(verdict, indent=2, sort_keys=True, allow_nan=False).encode()
    replace_file(version_dir / PROMOTION_FILE, data)


def read(version_dir: Path) -> dict[str, Any] | None:
    """The promotion verdict in ``version_dir``, or None when it has none: versions of ``--promote
    always|never`` and of releases before promotion. One that cannot be read is logged, naming the
    file, and given as a refusal: ``promote: false``, UNREADABLE: the problem, ``verdict`` saying it."""
    path = version_dir / PROMOTION_FILE
    try:
        note = read_note(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        problem = exc.strerror or str(exc)
    except TooLarge:
        problem = f"larger than {MAX_NOTE_BYTES} bytes"
    except NotJSON as exc:  # bad UTF-8, NaN, nesting too deep included
        problem = f"not JSON ({exc.reason})"
    else:
        if isinstance(note, dict) and (isinstance(note.get("promote"), bool) or _mark_only(note)):
            return note
        problem = "no verdict in it (no true or false promote)"
    log.warning("%s: %s: the version counts as refused at promotion", path, problem)
    return {"promote": False, UNREADABLE: problem, "verdict": f"verdict unreadable: {problem}"}


def _mark_only(note: Mapping[str, Any]) -> bool:
    """Whether ``note`` is the promotion.json mark_rolled_back gave a version that had none."""
    return "promote" not in note and isinstance(note.get(ROLLED_BACK), str)


def mark_rolled_back(version_dir: Path) -> bool:
    """Record on ``version_dir`` that `harp rollback` went back from it, now, its verdict kept;
    written atomically. False when its verdict cannot be read: left as it is, it counts as refused."""
    note = read(version_dir)
    if note is not None and isinstance(note.get(UNREADABLE), str):
        return False
    write(version_dir, dict(note or {}) | {ROLLED_BACK: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return True


def clear_rolled_back(version_dir: Path) -> bool:
    """Remove the mark of mark_rolled_back (an admin named the version to `harp rollback`, or the
    rollback that marked it could not move CURRENT); the promotion.json that held only the mark goes
    with it. Whether there was a mark."""
    note = read(version_dir)
    if note is None or not isinstance(note.get(ROLLED_BACK), str):
        return False
    if _mark_only(note):
        (version_dir / PROMOTION_FILE).unlink()
        fsync_dir(version_dir)
    else:
        write(version_dir, {k: v for k, v in note.items() if k != ROLLED_BACK})
    return True


def refusal(note: Mapping[str, Any] | None) -> str | None:
    """Why a version with verdict ``note`` (read's) may not serve in a fallback, or None: an admin
    rolled back from it, promotion judged it worse than the champion, never judged it
    (PENDING_VERDICT), or its verdict cannot be read. A version without promotion.json (None) is
    not refused."""
    if note is None:
        return None
    if isinstance(note.get(ROLLED_BACK), str):
        return f"was rolled back from ({note[ROLLED_BACK]})"
    if note.get("promote") is not False:
        return None
    if isinstance(note.get(UNREADABLE), str):
        return f"has an unreadable verdict ({note[UNREADABLE]})"
    return "awaits a verdict never written" if note.get("pending") is True else "was refused at promotion"
