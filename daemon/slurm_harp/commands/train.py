"""`harp train`: accounting (a file or live sacct) -> validated ONNX models + calibrated rule -> store.

For each target asked (``--target all``: every target the data has enough of), the model family
is fitted on the older jobs, one model is chosen and the safety rule calibrated on the most
recent ones (learning.trainer), and a new version is published with its card.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_harp.accounting import JobRecord, ReadStats, harvest_sacct, load_records, sacct_runner
from slurm_harp.commands.arguments import count, fraction, nonnegative, positive, rate
from slurm_harp.commands.method import (
    COMPARE,
    LADDER_ROWS,
    LEARNING_RATE,
    QUANTILES,
    SELECT,
    TREES,
    method_config,
    names,
    quantiles,
    selection,
    threads,
    trees,
)
from slurm_harp.config import REFIT
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import BY, MIN_GROUP_JOBS
from slurm_harp.model.store import ModelStore, StoreBusy

if TYPE_CHECKING:
    from slurm_harp.learning.pipeline import Outcome, Plan

log = logging.getLogger(__name__)

ALL = "all"
# Another `harp train` or `harp nightly` holds the model store (sysexits' EX_TEMPFAIL: try later).
STORE_BUSY = 75


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("train", help="train a model from accounting data and publish it")
    p.add_argument(
        "--source",
        help="SWF (.swf/.swf.gz), Eagle CSV (.csv), a saved `sacct -P` text file, or `sacct` to query live",
    )
    p.add_argument("--db", help="train from the harvester's job store (SQLite) instead of --source")
    p.add_argument(
        "--store",
        default=os.environ.get("HARP_STORE"),
        help="model store directory (default: $HARP_STORE)",
    )
    p.add_argument(
        "--target",
        default=Target.TIME.value,
        choices=[*(t.value for t in Target), ALL],
        help="what to model; 'all': each target the data has (default: %(default)s)",
    )
    p.add_argument("--quantiles", default=QUANTILES, type=quantiles, help="default: %(default)s")
    p.add_argument(
        "--compare",
        default=COMPARE,
        type=names,
        help="comparison models fitted beside the quantile ladder ('none' for none; default: %(default)s)",
    )
    p.add_argument(
        "--select",
        default=SELECT,
        type=selection,
        help="model choice on validation: PRIMARY,SECONDARY,TOLERANCE (metrics of the validation "
        "table; default WTM: lowest UPP, then lowest OV_MAPE among those within 1 point: %(default)s)",
    )
    p.add_argument(
        "--floor",
        type=positive,
        default=1.0,
        help="smallest limit the calibrated rule proposes, in the target's unit (default: %(default)s); "
        "the daemon's policy floors apply on top, which only makes its limits safer",
    )
    p.add_argument(
        "--kill-budget",
        type=fraction,
        default=0.01,
        help="fraction of validation jobs the calibrated rule may newly kill (default: %(default)s)",
    )
    p.add_argument(
        "--promote",
        choices=("auto", "always", "never"),
        default="auto",
        help="serve the new version: auto = only if not worse than the serving one on the latest "
        "validation window (default), always, or never",
    )
    p.add_argument(
        "--tolerance",
        type=nonnegative,
        default=0.5,
        help="waste-cut points a new version may lose to the serving one and still be promoted "
        "(default: %(default)s)",
    )
    p.add_argument("--keep", type=count, default=5, help="versions kept per target (default: %(default)s)")
    p.add_argument(
        "--refit",
        choices=REFIT,
        default=REFIT[0],
        help="once the rule is calibrated, the published models are: full = fitted again on every "
        "job (default); update = continued with a few trees fitted on the jobs since their fit "
        "(faster); off = served as fitted before the validation window (one window older)",
    )
    p.add_argument("--no-refit", dest="refit", action="store_const", const="off", help="= --refit off")
    p.add_argument("--max-rows", type=count, default=None, help="train on the most recent N jobs only")
    p.add_argument(
        "--threads",
        type=threads,
        default=1,
        help="LightGBM threads (the quantile ladder: that many one-thread fits side by side); more only "
        "on idle cores (default: 1)",
    )
    p.add_argument(
        "--trees",
        type=trees,
        default=TREES,
        help="boosting rounds of each quantile model; the censored refinement and the custom-loss "
        "models' start take a quarter of that (default: %(default)s)",
    )
    p.add_argument(
        "--learning-rate", type=rate, default=LEARNING_RATE, help="LightGBM's (default: %(default)s)"
    )
    p.add_argument(
        "--ladder-rows",
        type=count,
        default=LADDER_ROWS,
        help="the quantile ladder learns from at most N training jobs, spread evenly over the window "
        "(every job still feeds the history features); fewer is faster on a large site, more may "
        "fit it better (default: %(default)s)",
    )
    p.add_argument(
        "--calibrate-by",
        choices=BY,
        default=BY[0],
        help="partition: the safety rule measures each candidate limit's kill risk per partition "
        f"too (partitions with at least {MIN_GROUP_JOBS} validation jobs), not only over the whole window "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--sacct-start",
        default="now-90days",
        help="with --source sacct: sacct -S value (sacct runs in UTC: a date is UTC; default: %(default)s)",
    )
    p.set_defaults(func=run)


def read_source(source: str, sacct_start: str, db: str | None = None) -> tuple[list[JobRecord], ReadStats]:
    if db:
        from slurm_harp.accounting.jobstore import JobStore

        stats = ReadStats(source=db)
        with JobStore(db, readonly=True) as store:
            records = list(store.records())
        stats.records = len(records)
        return records, stats
    if source == "sacct":
        stats = ReadStats(source="sacct")
        return harvest_sacct(sacct_runner.run_sacct, sacct_start, None, stats), stats
    stats = ReadStats(source=source)
    return load_records(source, stats), stats


def run(args: argparse.Namespace) -> int:
    if not args.store:
        log.error("no model store: give --store or set HARP_STORE")
        return 2
    if bool(args.source) == bool(args.db):
        log.error("give exactly one of --source or --db")
        return 2
    origin = args.db or args.source
    if origin != "sacct" and not Path(origin).is_file():
        log.error("%s: no such file", origin)
        return 2
    try:
        records, stats = read_source(args.source, args.sacct_start, args.db)
    except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired, sqlite3.Error) as exc:
        log.error("cannot read %s: %s", origin, exc)
        return 2
    log.info("%s", stats.summary())
    from slurm_harp.learning.fitting import Refit
    from slurm_harp.learning.pipeline import Plan

    plan = Plan(
        store=Path(args.store),
        config=method_config(
            args.quantiles,
            args.compare,
            args.select,
            args.kill_budget,
            args.floor,
            args.threads,
            args.trees,
            args.learning_rate,
            args.ladder_rows,
            args.calibrate_by,
        ),
        source=origin,
        max_rows=args.max_rows,
        promote=args.promote,
        tolerance=args.tolerance,
        keep=args.keep,
        refit=Refit(args.refit),
    )
    targets = list(Target) if args.target == ALL else [Target(args.target)]
    return train_targets(records, targets, plan, every=args.target == ALL)


def train_targets(records: list[JobRecord], targets: list[Target], plan: Plan, every: bool) -> int:
    """Train, publish and judge each target, holding the store's writer lock; another run holding
    it: logged, nothing done, exit STORE_BUSY. ``every``: a target without enough data is skipped
    with a warning (the exit code is 1 only when none was published). A store that cannot be
    written (disk full, permissions) fails that target, logged, and the run goes on with the next
    one; the exit code is then 1. The serving version stays (model.store publishes atomically)."""
    with contextlib.ExitStack() as held:
        refused = hold_store(held, plan.store, "not training")
        if refused is not None:
            return refused
        return train_held(records, targets, plan, every)


def hold_store(held: contextlib.ExitStack, store: Path, skipped: str) -> int | None:
    """Take the model store's writer lock into ``held``: None when taken, else the exit code, logged
    (STORE_BUSY when another run holds it, saying ``skipped``)."""
    try:
        held.enter_context(ModelStore(store).writer())
    except StoreBusy as exc:
        log.error("%s: %s; the next run will (exit %d)", exc, skipped, STORE_BUSY)
        return STORE_BUSY
    except OSError as exc:
        log.error("cannot lock the model store %s: %s", store, exc)
        return 1
    return None


def train_held(records: list[JobRecord], targets: list[Target], plan: Plan, every: bool) -> int:
    """train_targets for a caller that holds the store's writer lock already (hold_store)."""
    from slurm_harp.learning.dataset import build_dataset
    from slurm_harp.learning.pipeline import Unfinished, Unloadable, train_and_publish
    from slurm_harp.learning.trainer import NotEnoughData, TrainingError

    data = build_dataset(records, max_rows=plan.max_rows)  # the same features serve every target
    published = 0
    missed: dict[Target, str] = {}  # what happened to each target not published, said at the end
    for target in targets:
        try:
            outcome = train_and_publish(records, data, target, plan)
        except TrainingError as exc:
            if not every:
                log.error("training failed: %s", exc)
                return 1
            log.warning("%s: not trained: %s", target.value, exc)
            missed[target] = NO_DATA if isinstance(exc, NotEnoughData) else NOT_TRAINED
        except Unloadable as exc:
            log.error("%s: %s; never served, the serving version stays", target.value, exc)
            missed[target] = f"published {exc.version}, which does not load"
        except Unfinished as exc:
            log.error("%s: %s", target.value, exc)
            missed[target] = "published, not finished"
        except OSError as exc:
            log.error(
                "%s: trained but not published in %s: %s; the serving version stays",
                target.value,
                plan.store,
                exc,
            )
            missed[target] = "not published"
        else:
            published += 1
            _print(outcome, plan)
    # A target the data could not train is skipped; one the store failed fails the run.
    faults = sum(why not in (NO_DATA, NOT_TRAINED) for why in missed.values())
    _log_missed(missed, published, faults)
    return 0 if published and not faults else 1


NO_DATA = "not enough data"
NOT_TRAINED = "not trained"


def _log_missed(missed: dict[Target, str], published: int, faults: int) -> None:
    """One line on the targets not published when it matters: none was, or the store failed one;
    "no target had enough data" only when that is what happened to each."""
    what = "; ".join(f"{target.value}: {why}" for target, why in missed.items())
    if not published and missed and set(missed.values()) == {NO_DATA}:
        log.error("training failed: no target had enough data")
    elif not published and missed:
        log.error("training failed: no target was published: %s", what)
    elif faults:
        log.error("training failed for some targets: %s", what)


def _print(outcome: Outcome, plan: Plan) -> None:
    from slurm_harp.core.accuracy import format_summary

    target, result = outcome.target, outcome.result
    where = ModelStore(plan.store).target_dir(target)
    print(f"published {target.value} model {outcome.version} in {where}")
    training = result.card["training"]
    print(f"trained on {training['rows_train']} jobs, validated on {training['rows_validation']}")
    for key, values in result.validation.items():
        label = "request" if key == "request" else f"q{key}"
        shown = {k: v for k, v in values.items() if v is not None}
        print(f"  {label:8} {format_summary(shown)}")
    selection = result.card["selection"]
    print(f"  chosen by {selection['policy']['name']} on validation: {selection['chosen']}")
    rule = result.card["calibration"]
    figures = rule["validation"]
    net = figures.get("net_cut_pct")
    print(
        f"  safety rule: {len(rule['rungs'])} rungs, cuts {figures['waste_cut_pct']:.1f} % of the "
        f"validation waste at {figures['newly_killed_pct']:.2f} % newly killed "
        f"(budget {100 * rule['kill_budget']:.2f} %)"
        + ("" if net is None else f"; {net:.1f} % net of the killed jobs' attempts and re-runs")
    )
    if outcome.verdict is not None:
        print(f"  {outcome.verdict.summary}")
    elif outcome.promoted:
        print("  promoted (--promote always)")
    else:
        print("  not promoted (--promote never)")
    if outcome.pruned:
        print(f"  removed old versions: {', '.join(outcome.pruned)}")
