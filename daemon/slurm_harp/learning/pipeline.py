"""Train one target, publish it as a new version, promote it if it is not worse, prune old ones.

Shared by `harp train` and `harp nightly`. Crash safety comes from the store: a version appears
only complete (temp directory + rename), CURRENT moves by an atomic rename and only after the
verdict, so a crash at any point leaves the serving model as it was; what a crash leaves behind
(temp directories, a published but unpromoted version) is swept or pruned by a later run.
A version to be judged is published with a pending verdict (model.verdict.PENDING_VERDICT), read as
refused until its own verdict replaces it: whatever fails in between (a crash, a verdict that
cannot be written, then its removal), the daemon's fallback and `harp rollback` never take it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Policy
from slurm_harp.core.request import Target
from slurm_harp.learning.dataset import Dataset
from slurm_harp.learning.fitting import MethodConfig, Refit
from slurm_harp.learning.promotion import Verdict, challenge
from slurm_harp.learning.trainer import TrainResult, train_target
from slurm_harp.model.retention import discard, prune, sweep
from slurm_harp.model.runtime import ModelError
from slurm_harp.model.store import ModelStore

log = logging.getLogger(__name__)

Promote = Literal["auto", "always", "never"]


class Unfinished(Exception):
    """The version was published but a later step failed: the message says which, and what serves."""


class Unloadable(Exception):
    """The version was published but does not load (a file garbled on disk, a sha256 mismatch): a
    fault of the store, not of the data. Never promoted: it keeps its pending verdict (refused in
    every fallback) until retention prunes it."""

    def __init__(self, version: str, error: ModelError) -> None:
        super().__init__(f"published {version} but it does not load: {error}")
        self.version = version


@dataclass(frozen=True)
class Plan:
    store: Path
    config: MethodConfig
    source: str = ""
    max_rows: int | None = None
    promote: Promote = "auto"  # auto: when not worse (learning.promotion); always; never
    refit: Refit = Refit.FULL  # how the published models meet the newest jobs (learning.fitting)
    tolerance: float = 0.5
    keep: int = 5
    # The policy the daemon sets limits under: promotion judges both versions by those limits.
    policy: Policy = field(default_factory=Policy)


@dataclass(frozen=True)
class Outcome:
    target: Target
    version: str
    promoted: bool
    verdict: Verdict | None  # None unless promote is "auto"
    result: TrainResult
    pruned: tuple[str, ...] = ()


def train_and_publish(
    records: Sequence[JobRecord], data: Dataset, target: Target, plan: Plan, now: float | None = None
) -> Outcome:
    """Raises TrainingError when nothing fit to publish came out (the store is then untouched),
    Unloadable when the version published does not load, Unfinished when a step after it failed.
    ``now``: the clock ``records`` were filtered by (promotion.challenge)."""
    result = train_target(
        records,
        target,
        plan.config,
        source=plan.source,
        max_rows=plan.max_rows,
        data=data,
        refit=plan.refit,
    )
    store = ModelStore(plan.store)
    sweep(store, target)
    judged = plan.promote == "auto"
    # Born marked as not judged: until its verdict is written, nothing serves it in any fallback.
    version = store.publish(target, result.files, result.card, make_current=False, awaiting_verdict=judged)
    verdict: Verdict | None = None
    if judged:
        try:
            verdict = challenge(
                store,
                target,
                version,
                result.window,
                plan.config.calibration.kill_budget,
                plan.tolerance,
                now,
                plan.policy,
            )
        except ModelError as exc:
            raise Unloadable(version, exc) from exc
        try:
            store.write_verdict(target, version, verdict.to_dict())
        except OSError as exc:
            log.error("%s: cannot write the verdict on %s (%s): removing it", target.value, version, exc)
            _remove_unjudged(store, target, version)
            raise
    promoted = plan.promote == "always" or (verdict is not None and verdict.promote)
    if promoted:
        try:
            store.set_current(target, version)
        except OSError as exc:
            if verdict is not None:
                _unpromote(store, target, version, verdict, exc)
            raise Unfinished(
                f"published {version} but could not make it serve ({exc}); the serving version stays"
            ) from exc
    try:
        pruned = tuple(prune(store, target, plan.keep))
    except OSError as exc:
        serving = "serving it" if promoted else "kept as a challenger"
        raise Unfinished(
            f"published {version} ({serving}) but could not prune older versions: {exc}"
        ) from exc
    log.info(
        "%s: version %s %s%s",
        target.value,
        version,
        "promoted" if promoted else "kept as a challenger",
        f" ({verdict.reason})" if verdict else "",
    )
    return Outcome(target, version, promoted, verdict, result, pruned)


def _unpromote(store: ModelStore, target: Target, version: str, verdict: Verdict, exc: OSError) -> None:
    """Its verdict said "promoted" but CURRENT did not move: say so, or `harp models` would list a
    promoted version that nothing serves. Should this write fail too, the verdict stays as judged."""
    reason = f"CURRENT could not be moved to it ({exc}); judged: {verdict.reason}"
    try:
        store.write_verdict(target, version, replace(verdict, promote=False, reason=reason).to_dict())
    except OSError as again:
        log.error("%s: cannot rewrite the verdict on %s either: %s", target.value, version, again)


def _remove_unjudged(store: ModelStore, target: Target, version: str) -> None:
    """Remove a version whose verdict could not be written. Should that fail too, it keeps the
    pending verdict it was published with: the daemon's fallback and `harp rollback` skip it as
    refused, and retention prunes it."""
    try:
        discard(store, target, version)
    except OSError as exc:
        log.error(
            "%s: cannot remove %s either (%s): it stays, marked not judged, never served unless named "
            "to `harp rollback`",
            target.value,
            version,
            exc,
        )
