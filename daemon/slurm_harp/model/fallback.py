"""The version that serves in place of one that cannot: the newest older version that promotion did
not refuse (nor a rollback pass over) and that loads.

One rule for the three places that need it: the daemon at a start whose CURRENT does not load,
`harp rollback` without a version, and retention, which must keep that version. Each caller says in
its own words what it passed over (``PassedOver``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slurm_harp.core.request import Target
from slurm_harp.model.runtime import ModelError, QuantileModel, load_version
from slurm_harp.model.store import ModelStore


@dataclass(frozen=True, slots=True)
class PassedOver:
    """A version the fallback did not take: refused (why), or it does not load (the error)."""

    version: str
    refusal: str | None = None
    error: ModelError | None = None


def newest_loadable(
    store: ModelStore,
    target: Target,
    before: str | None,
    passed: Callable[[PassedOver], None] = lambda _: None,
) -> QuantileModel | None:
    """The newest version of ``target`` older than ``before`` (None: any) that promotion did not
    refuse and that loads, loaded; None when there is none. ``passed`` hears of each newer one
    passed over. Raises OSError when the store's versions cannot be listed."""
    for version in reversed(store.versions(target)):
        if before is not None and version >= before:
            continue
        refusal = store.refusal(target, version)
        if refusal is not None:
            passed(PassedOver(version, refusal=refusal))
            continue
        try:
            return load_version(store.target_dir(target) / version, target)
        except ModelError as exc:
            passed(PassedOver(version, error=exc))
    return None
