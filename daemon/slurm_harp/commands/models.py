"""`harp models` lists the stored versions; `harp rollback` serves an earlier one again, and marks
the versions it goes back past as rolled back from (model.verdict) so that no fallback serves them."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os

from slurm_harp.commands.publication import STORE_BUSY
from slurm_harp.core.request import Target
from slurm_harp.model import verdict as verdicts
from slurm_harp.model.card import CARD_FILE
from slurm_harp.model.store import ModelStore, StoreBusy
from slurm_harp.model.store_files import read_note
from slurm_harp.regular_file import NotJSON

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    store_default = os.environ.get("HARP_STORE", "/var/lib/slurm-harp/models")
    p = subparsers.add_parser("models", help="list model versions per target (* = serving)")
    p.add_argument("--store", default=store_default, help="model store (default: $HARP_STORE or %(default)s)")
    p.add_argument("--target", choices=[t.value for t in Target], default=None)
    p.set_defaults(func=list_models)
    r = subparsers.add_parser("rollback", help="make an earlier version the serving one")
    r.add_argument("--store", default=store_default, help="model store (default: $HARP_STORE or %(default)s)")
    r.add_argument("--target", choices=[t.value for t in Target], default=Target.TIME.value)
    r.add_argument(
        "version",
        nargs="?",
        help="version to serve (default: the newest older one that loads, not refused nor rolled back from)",
    )
    r.add_argument(
        "--force",
        action="store_true",
        help="roll back while a harp train or nightly holds the store (its promotion may move CURRENT again)",
    )
    r.set_defaults(func=rollback)


def _summary(store: ModelStore, target: Target, version: str) -> str:
    try:
        card = read_note(store.target_dir(target) / version / CARD_FILE)
    except NotJSON as exc:
        return f"(card unreadable: {exc.reason})"
    except (OSError, ValueError) as exc:  # TooLarge says "larger than"
        return f"(card unreadable: {exc})"
    if not isinstance(card, dict):
        return "(card unreadable: not a JSON object)"
    training = card.get("training")
    if not isinstance(training, dict):
        training = {}
    parts = [f"trained on {training.get('rows_train', '?')} jobs"]
    figures = (
        card.get("calibration", {}).get("validation") if isinstance(card.get("calibration"), dict) else None
    )
    cut, killed, net = (_number(figures, k) for k in ("waste_cut_pct", "newly_killed_pct", "net_cut_pct"))
    if cut is not None and killed is not None:
        parts.append(
            f"validation: cuts {cut:.1f} % of the waste at {killed:.2f} % newly killed"
            + (f" ({net:.1f} % net of the kills)" if net is not None else "")  # walltime cards since
        )
    verdict = store.verdict(target, version)
    if verdict is not None and "verdict" in verdict:
        parts.append(str(verdict["verdict"]))
    if verdict is not None and isinstance(verdict.get(verdicts.ROLLED_BACK), str):
        parts.append(f"rolled back from ({verdict[verdicts.ROLLED_BACK]})")
    return ", ".join(parts)


def _number(figures: object, key: str) -> float | None:
    """A figure of a card edited by hand or by another release may be text, or missing."""
    value = figures.get(key) if isinstance(figures, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _current(store: ModelStore, target: Target, versions: list[str]) -> str | None:
    """The version CURRENT names, saying what is wrong with it (one line) when it names none listed."""
    current = store.current(target)
    if current.unreadable is not None:
        print(f"  CURRENT unreadable: {current.unreadable}")
    elif current.names is not None and current.names not in versions:
        print(f"  CURRENT names {current.names}, which is not a complete version")
    return current.names


def store_at(path: str) -> ModelStore | None:
    """The model store at ``path``; None, said, when no directory is there: a mistyped --store or
    $HARP_STORE listed "no model" for every target with exit 0, and a rollback made the directory
    for its lock before it found nothing to roll back to."""
    if not os.path.isdir(path):
        log.error("no model store at %s", path)
        return None
    return ModelStore(path)


def list_models(args: argparse.Namespace) -> int:
    store = store_at(args.store)
    if store is None:
        return 2
    targets = [Target(args.target)] if args.target else list(Target)
    for target in targets:
        versions = store.versions(target)
        if not versions:
            print(f"{target.value}: no model")
            continue
        print(f"{target.value}:")
        current = _current(store, target, versions)
        for version in reversed(versions):
            mark = "*" if version == current else " "
            print(f"  {mark} {version}  {_summary(store, target, version)}")
    return 0


def rollback(args: argparse.Namespace) -> int:
    """Under the store's writer lock: a nightly promoting meanwhile would move CURRENT again, from
    a champion it read before the rollback, and its prune judge what to keep from that too."""
    store = store_at(args.store)
    if store is None:
        return 2
    with contextlib.ExitStack() as held:
        if not args.force:
            try:
                held.enter_context(store.writer())
            except StoreBusy as exc:
                log.error(
                    "%s: not rolled back, since its promotion could move CURRENT again; run again when it "
                    "ends, or with --force (to stop serving a model at once: the harp.disable switch file, "
                    "or mode shadow in harp.toml) (exit %d)",
                    exc,
                    STORE_BUSY,
                )
                return STORE_BUSY
            except OSError as exc:
                log.error("cannot lock the model store %s: %s", store.root, exc)
                return 1
        return _roll_back(store, Target(args.target), args.version)


def _roll_back(store: ModelStore, target: Target, version: str | None) -> int:
    versions = store.versions(target)
    read = store.current(target)
    if read.unreadable is not None:  # the tool to repair it: CURRENT is replaced, not followed
        log.warning("%s: CURRENT unreadable (%s): replacing it", target.value, read.unreadable)
    current = read.names
    if version is None:
        version = _fallback(store, target, current)
        if version is None:
            log.error(
                "%s: no version older than %s to roll back to (challengers refused at promotion or "
                "never judged, versions rolled back from and versions that do not load are skipped: "
                "name one to serve it)",
                target.value,
                current,
            )
            return 1
    try:
        store.version_dir(target, version)  # a link is none, named as such
    except ValueError as exc:
        log.error("%s: not serving %s: %s", target.value, version, exc)
        return 1
    if not _loads(store, target, version):
        log.error("%s: not serving %s: it does not load; %s still serves", target.value, version, current)
        return 1
    # Marked before CURRENT moves: a crash between leaves them marked and the old one serving, never
    # one withdrawn unmarked. A step back withdraws every version it passes over, not only the one
    # serving: the fallbacks take the newest older one not refused. A step forward marks nothing.
    passed = [v for v in versions if current is not None and version < v <= current]
    marked, refused, unmarked = _mark(store, target, passed)
    try:
        store.set_current(target, version)
    except OSError as exc:
        log.error(
            "%s: not rolled back: CURRENT cannot be replaced (%s); %s still serves",
            target.value,
            exc,
            current,
        )
        for passed_over in marked:  # withdrawn for a rollback that did not happen
            _clear(store, target, passed_over)
        return 1
    cleared = _clear(store, target, version)
    said = [f"{target.value}: now serving {version} (was {current})"]
    if marked:
        said.append(f"marked as rolled back from, served by no fallback unless named: {', '.join(marked)}")
    if refused:
        said.append(f"refused already: {', '.join(refused)}")
    if cleared:
        said.append(f"the mark of {version} as rolled back from is removed")
    print("; ".join([*said, "the daemon picks it up on its next poll"]))
    return 1 if unmarked or cleared is None else 0


def _mark(store: ModelStore, target: Target, versions: list[str]) -> tuple[list[str], list[str], bool]:
    """Mark ``versions``, those a rollback passes over, as rolled back from: the daemon's fallback at
    a start and a rollback without a version served one again once a newer version failed to load.
    One refused already (its verdict, an earlier mark, one unreadable) is left as it is. Returns the
    versions marked, those refused already, and whether one could not be marked (logged)."""
    marked: list[str] = []
    refused: list[str] = []
    unmarked = False
    for version in versions:
        try:
            written = not store.refused(target, version) and verdicts.mark_rolled_back(
                store.version_dir(target, version)
            )
        except (OSError, ValueError) as exc:
            log.error(
                "%s: cannot mark %s as rolled back from (%s): a fallback may serve it again",
                target.value,
                version,
                exc,
            )
            unmarked = True
            continue
        (marked if written else refused).append(version)
    return marked, refused, unmarked


def _clear(store: ModelStore, target: Target, version: str) -> bool | None:
    """Remove the mark of ``version`` (named to serve, or marked for a rollback that failed):
    whether it had one, None when it stays (logged)."""
    try:
        return verdicts.clear_rolled_back(store.version_dir(target, version))
    except (OSError, ValueError) as exc:
        log.error(
            "%s: the mark of %s as rolled back from cannot be removed (%s): no fallback serves it until "
            "it is named to harp rollback",
            target.value,
            version,
            exc,
        )
        return None


def _fallback(store: ModelStore, target: Target, current: str | None) -> str | None:
    """The version the daemon would fall back to (model.fallback): the newest older one not refused
    (nor rolled back from) that loads."""
    from slurm_harp.model.fallback import PassedOver, newest_loadable  # onnxruntime: only to roll back

    def passed(over: PassedOver) -> None:
        if over.error is not None:
            log.warning("%s: version %s does not load: %s", target.value, over.version, over.error)

    model = newest_loadable(store, target, current, passed)
    return model.version if model is not None else None


def _loads(store: ModelStore, target: Target, version: str) -> bool:
    """Whether ``version`` loads as the daemon loads it (a daemon rejects one that does not, and
    after a restart serves only versions older than CURRENT): the problem is logged."""
    from slurm_harp.model.runtime import ModelError, load_version  # onnxruntime: only to roll back

    try:
        load_version(store.target_dir(target) / version, target)
    except ModelError as exc:
        log.warning("%s: version %s does not load: %s", target.value, version, exc)
        return False
    return True
