"""Which model versions to keep: the newest N, the newest N that promotion did not refuse, and always
the one being served and the one the daemon's fallback would serve in its place (the newest older
one not refused that loads).

The daemon's fallback (a CURRENT that does not load after a restart) and `harp rollback` take the
newest older version that promotion did not refuse: nights of refused challengers must not prune
the champions before them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
from pathlib import Path

from slurm_harp.core.request import Target
from slurm_harp.model.card import PROMOTION_FILE
from slurm_harp.model.fallback import PassedOver, newest_loadable
from slurm_harp.model.store import CURRENT_FILE, VERSION_NAME, ModelStore
from slurm_harp.state_dir import is_new_file_of

log = logging.getLogger(__name__)

# A publish that crashed leaves its hidden temp directory; one this old is no longer being written.
STALE_TEMP_S = 3600.0


def prune(store: ModelStore, target: Target, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` versions of ``target`` and the newest ``keep`` of those
    promotion did not refuse; CURRENT is never deleted, nor the newest version older than it that
    was not refused and loads (what the daemon serves when CURRENT does not load at a start). Nothing is
    deleted while CURRENT cannot be read: what it should name is not known. A version whose card
    cannot be looked at is never deleted (logged) and does not count among the ``keep``.

    Returns the removed version names. A rollback target must exist, so ``keep`` is at least 1.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    current = store.current(target)
    if current.unreadable is not None:
        log.warning("%s: CURRENT unreadable (%s): no version pruned", target.value, current.unreadable)
        return []
    versions = _inspectable(store, target)
    judged = [v for v in versions if not store.refused(target, v)]
    fallback = _fallback(
        store, target, current.names, [v for v in judged if current.names is None or v < current.names]
    )
    kept = {*versions[-keep:], *judged[-keep:], *fallback, current.names}
    doomed = []
    for version in (v for v in versions if v not in kept):
        if store.current(target).names == version:  # a `harp rollback` meanwhile (it takes no lock)
            continue
        gone = discard(store, target, version)
        doomed.append(version)  # no longer a version either way: renamed out of the store
        if gone:
            log.info(
                "removed %s model %s (keeping the newest %d, and of those not refused)",
                target.value,
                version,
                keep,
            )
        else:
            log.warning(
                "%s: version %s withdrawn (as .trash-%s) but not all of its files could be deleted: "
                "a later run tries again",
                target.value,
                version,
                version,
            )
    return doomed


def _fallback(store: ModelStore, target: Target, before: str | None, older: list[str]) -> list[str]:
    """What the daemon's fallback serves (model.fallback) in place of ``before``, CURRENT. Keeping
    the newest not refused whatever it was (its card garbled, say), the one that loaded was pruned,
    and a CURRENT that did not load at a start left the target unserved. None loading: the newest
    of ``older`` (the versions before CURRENT not refused), as before (it may yet be mended by hand)."""

    def passed(over: PassedOver) -> None:
        if over.error is not None:
            log.warning(
                "%s: version %s does not load, no fallback: %s", target.value, over.version, over.error
            )

    model = newest_loadable(store, target, before, passed)
    return [model.version] if model is not None else older[-1:]


def _inspectable(store: ModelStore, target: Target) -> list[str]:
    """``target``'s versions but those whose card cannot be looked at (a directory copied in by
    root with umask 077), each logged: whether promotion refused it cannot be known, nor could it be
    deleted whole (its files cannot be listed). It failed the prune of every night."""
    versions = store.versions(target)
    unreadable = {v: why for v in versions if (why := store.unreadable(target, v)) is not None}
    for version, why in unreadable.items():
        log.warning("%s: version %s cannot be read (%s): not pruned", target.value, version, why)
    return [v for v in versions if v not in unreadable]


def discard(store: ModelStore, target: Target, version: str) -> bool:
    """Remove one version. Renamed first so a half-deleted directory never looks like a complete
    version (what is left of it, a hidden ``.trash-`` directory, is swept by a later run); whether
    all of it is gone (files its caller may not delete stay)."""
    path = store.target_dir(target) / version
    trash = path.with_name(f".trash-{version}")
    path.rename(trash)
    return _remove(trash)


def sweep(store: ModelStore, target: Target, now: float | None = None) -> list[str]:
    """Remove what crashed publishes, deletions and replacements left behind, older than
    STALE_TEMP_S: hidden temp and trash directories (or links under such names), and the hidden new
    files of a CURRENT or a version's promotion.json never renamed into place. Returns the names
    really removed (a version's file as version/name); one that stays (a file in it that cannot be
    deleted) is logged and left for a later run."""
    target_dir = store.target_dir(target)
    if not target_dir.is_dir() or target_dir.is_symlink():
        return []
    now = time.time() if now is None else now
    removed = []
    for path in _leftovers(target_dir):
        st = _lstat(path)  # a link's own age: its target is not the store's
        if st is None or now - st.st_mtime <= STALE_TEMP_S:
            continue
        if _remove(path):
            log.info("removed %s left by an interrupted publish, prune or replacement", path)
            removed.append(str(path.relative_to(target_dir)))
        else:
            log.warning(
                "cannot remove %s, left by an interrupted publish, prune or replacement: it stays",
                path,
            )
    return removed


def _leftovers(target_dir: Path) -> list[Path]:
    """sweep's candidates, known by name, then kind (lstat: no link is followed). An entry gone
    meanwhile (a rollback's CURRENT renamed into place) or a version that cannot be listed is passed
    over: a sweep never stops the training it runs before."""
    found = []
    for path in target_dir.iterdir():
        name = path.name
        if name.startswith((".tmp-", ".trash-")):
            if _kind(path) in (stat.S_IFDIR, stat.S_IFLNK):
                found.append(path)
        # What a process killed while it replaced CURRENT or a version's promotion.json leaves beside
        # it: nothing reads these, and nights of crashes piled them up.
        elif is_new_file_of(name, CURRENT_FILE):
            if _kind(path) in (stat.S_IFREG, stat.S_IFLNK):
                found.append(path)
        elif VERSION_NAME.fullmatch(name) and _kind(path) == stat.S_IFDIR:
            try:
                inside = list(path.iterdir())
            except OSError as exc:
                log.warning("cannot list %s for leftovers: %s", path, exc)
                continue
            for inner in inside:
                if is_new_file_of(inner.name, PROMOTION_FILE) and _kind(inner) in (
                    stat.S_IFREG,
                    stat.S_IFLNK,
                ):
                    found.append(inner)
    return found


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except OSError:
        return None


def _kind(path: Path) -> int | None:
    st = _lstat(path)
    return None if st is None else stat.S_IFMT(st.st_mode)


def _remove(path: Path) -> bool:
    """Remove ``path`` and whatever it holds, or the link or file it is (rmtree refuses a link, and said
    nothing with ignore_errors: a ``.trash-`` link was reported removed at every sweep); whether
    it is gone."""
    if path.is_symlink() or not path.is_dir():
        with contextlib.suppress(OSError):  # said below: it is still there
            path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)
