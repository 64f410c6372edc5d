"""Load the store's current models, keeping the last good one whenever a new one fails."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from slurm_harp.core.predictor import QuantilePredictor
from slurm_harp.core.request import Target
from slurm_harp.model.fallback import PassedOver, newest_loadable
from slurm_harp.model.runtime import ModelError, QuantileModel, load_version
from slurm_harp.model.store import CURRENT_FILE, Current, ModelStore
from slurm_harp.server.serving_metrics import ServingMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReloadResult:
    models: dict[Target, QuantilePredictor]
    loaded: tuple[str, ...]  # versions newly loaded
    rejected: tuple[str, ...]  # "target: problem" for each rejected candidate


def reload_models(
    store_root: Path,
    current: Mapping[Target, QuantilePredictor],
    metrics: ServingMetrics | None = None,
) -> ReloadResult:
    """Load each target's CURRENT version unless it is already serving.

    A candidate that fails validation is rejected (logged and counted) and the model already
    serving that target keeps serving: a bad file never replaces a good model. So is a CURRENT that
    cannot be read or names no version in the store. Where nothing serves the target yet (a
    start), the newest version older than the one CURRENT names (any, when it names none readable)
    that loads and that promotion did not refuse serves instead. A target with no CURRENT in its
    directory is not served: an admin withdrew it (harp's own writes replace CURRENT by a rename,
    never leaving it absent), or it was never promoted. One whose directory is gone too (the store
    unmounted) keeps serving what it served.
    """
    store = ModelStore(store_root)
    models = dict(current)
    loaded: list[str] = []
    rejected: list[str] = []
    for target in Target:
        serving = models.get(target)
        pointer = store.current(target)
        if pointer.names is None and pointer.unreadable is None:  # no CURRENT
            if serving is not None and not store.target_dir(target).is_dir():
                # Its directory gone too: the store unmounted, an NFS hiccup, a restore under way,
                # not a withdrawal (which removes CURRENT alone): the last good model keeps serving.
                log.error(
                    "%s: %s is not there; serving %s (to withdraw it, remove its CURRENT alone)",
                    target.value,
                    store.target_dir(target),
                    serving.version,
                )
                continue
            if serving is not None:
                del models[target]
                log.warning(
                    "%s: no CURRENT in %s; no longer serving %s", target.value, store.root, serving.version
                )
            continue
        candidate, problem = pointer.path, _problem(store, target, pointer)
        if candidate is not None and serving is not None and serving.version == candidate.name:
            continue
        model: QuantileModel | None = None
        if candidate is not None:
            try:
                model = load_version(candidate, target)  # the card must be for this directory's target
            except ModelError as exc:
                problem = (f"model {candidate}", str(exc))
                rejected.append(f"{target.value}: {exc}")
        elif problem is not None:
            rejected.append(f"{target.value}: {problem[0]}: {problem[1]}")
        if problem is not None:
            if metrics is not None:
                metrics.reloads.labels(target.value, "rejected").inc()
            # Nothing serves this target yet (a start): the newest older version that loads, older
            # than what CURRENT names (no bound when it names nothing readable).
            if serving is None:
                model = _newest_loadable(store, target, pointer.names)
            if model is None:
                kept = serving.version if serving is not None else "none"
                log.error("rejected %s for %s (%s); serving %s", problem[0], target.value, problem[1], kept)
                continue
            older = "the older " if pointer.names is not None else ""  # unreadable: older than nothing
            log.error("rejected %s for %s (%s); serving %s%s until a good one is promoted",
                      problem[0], target.value, problem[1], older, model.version)  # fmt: skip
        assert model is not None  # CURRENT's version loaded, or a fallback did
        models[target] = model
        loaded.append(model.version)
        log.info("serving %s model %s", target.value, model.version)
        if metrics is not None:
            metrics.reloads.labels(target.value, "loaded").inc()
    if metrics is not None:
        created = {t.value: _created(m) for t, m in models.items()}
        budgets = {t.value: _kill_budget(m) for t, m in models.items()}
        metrics.serving(
            {t.value: m.version for t, m in models.items()},
            {t: c for t, c in created.items() if c is not None},
            {t: b for t, b in budgets.items() if b is not None},
        )
    return ReloadResult(models=models, loaded=tuple(loaded), rejected=tuple(rejected))


def _problem(store: ModelStore, target: Target, current: Current) -> tuple[str, str] | None:
    """(what, why) when ``current`` names nothing to load; None when it does, or there is none."""
    if current.unreadable is not None:  # a bad name, a link, a FIFO, an I/O error
        return "CURRENT", f"unreadable: {current.unreadable}"
    if current.missing:  # removed by hand, a restore, a rollback racing a prune
        pointer = store.target_dir(target) / CURRENT_FILE
        return str(pointer), f"it names {current.names}, which is not in the store"
    return None


def _newest_loadable(store: ModelStore, target: Target, before: str | None) -> QuantileModel | None:
    """model.fallback's version for a start whose CURRENT does not load: retention keeps it, so a
    broken CURRENT after a restart does not leave the target unserved, and a challenger judged
    worse than its champion (over the kill budget, say) is never served in its place. None, logged,
    when the store cannot be listed: the other targets' models load all the same."""
    try:
        return newest_loadable(store, target, before, lambda passed: _passed_over(target, passed))
    except OSError as exc:
        log.error("model store %s: cannot list the older %s versions: %s", store.root, target.value, exc)
        return None


def _passed_over(target: Target, passed: PassedOver) -> None:
    if passed.refusal is not None:
        log.warning("older model %s for %s %s: not served", passed.version, target.value, passed.refusal)
    else:
        log.warning(
            "older model %s for %s does not load either: %s", passed.version, target.value, passed.error
        )


def store_fingerprint(store_root: Path) -> tuple[object, ...]:
    """Cheap change detector for polling: every target's CURRENT pointer, and the files of the
    version it names as they stand (name, inode, size, times). A version rejected while it was
    being copied in is so tried again once a file of it changes, and not at every poll (each
    logging the rejection again) while nothing does."""
    store = ModelStore(store_root)
    pointers = (store.current(target) for target in Target)
    return tuple((p.names, p.unreadable, _version_state(p.path)) for p in pointers)


def _version_state(version_dir: Path | None) -> tuple[object, ...]:
    """What a reload of ``version_dir`` would find changed (the directory's own times, for a
    permission fixed)."""
    if version_dir is None:
        return ()
    try:
        own = version_dir.stat()
        with os.scandir(version_dir) as entries:
            files = sorted((e.name, *_file_state(e.stat(follow_symlinks=False))) for e in entries)
    except OSError as exc:
        return (str(exc),)
    return (_file_state(own), tuple(files))


def _file_state(st: os.stat_result) -> tuple[int, ...]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _created(model: QuantilePredictor) -> float | None:
    """The model card's training time as a Unix time, where the model has a card that says."""
    card = getattr(model, "card", None)
    text = card.get("created") if isinstance(card, dict) else None
    try:
        return datetime.fromisoformat(text).timestamp() if isinstance(text, str) else None
    except ValueError:
        return None


def _kill_budget(model: QuantilePredictor) -> float | None:
    """The kill budget the model's rule was calibrated to, where its card has a calibrated rule."""
    card = getattr(model, "card", None)
    calibration = card.get("calibration") if isinstance(card, dict) else None
    budget = calibration.get("kill_budget") if isinstance(calibration, dict) else None
    return float(budget) if isinstance(budget, (int, float)) and 0.0 <= budget <= 1.0 else None
