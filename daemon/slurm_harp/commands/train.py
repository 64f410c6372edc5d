"""`harp train`: accounting (a file or live sacct) -> validated ONNX models + calibrated rule -> store.

For each target asked (``--target all``: every target the data has enough of), the model family
is fitted on the older jobs, one model is chosen and the safety rule calibrated on the most
recent ones (learning.trainer), and a new version is published with its card.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import subprocess
import time
from pathlib import Path

from slurm_harp.accounting import JobRecord, ReadStats, harvest_sacct, load_records, sacct_runner
from slurm_harp.commands.arguments import (
    count,
    delimiter_option,
    fraction,
    input_problem,
    nonnegative,
    positive,
    rate,
    warn_if_guessable,
)
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
from slurm_harp.commands.publication import train_targets
from slurm_harp.config import REFIT
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import BY, MIN_GROUP_JOBS

log = logging.getLogger(__name__)

ALL = "all"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("train", help="train a model from accounting data and publish it")
    p.add_argument(
        "--source",
        help="SWF (.swf/.swf.gz), Eagle CSV (.csv), a saved `sacct -P` text file, or `sacct` to query live",
    )
    p.add_argument("--db", help="train from the harvester's job store (SQLite) instead of --source")
    delimiter_option(p)
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
        help="fraction of validation jobs the calibrated rule may newly kill (default: %(default)s); "
        "with fewer than 3 / budget usable validation jobs the rule never rewrites",
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


def read_source(
    source: str,
    sacct_start: str,
    db: str | None = None,
    delimiter: str | None = None,
    *,
    newest: int | None = None,
    now: float | None = None,
) -> tuple[list[JobRecord], ReadStats]:
    """The records to train on. From a job store (``db``), only what training on the ``newest``
    jobs (--max-rows) with the clock at ``now`` reads, as `harp nightly` does."""
    if db:
        from slurm_harp.accounting.jobstore import JobStore

        stats = ReadStats(source=db)
        with JobStore(db, readonly=True) as store:
            records = list(store.training_records(newest, time.time() if now is None else now))
        stats.records = len(records)
        return records, stats
    if source == "sacct":
        stats = ReadStats(source="sacct")
        return harvest_sacct(sacct_runner.run_sacct, sacct_start, None, stats), stats
    stats = ReadStats(source=source)
    warn_if_guessable(source, delimiter)
    return load_records(source, stats, delimiter=delimiter), stats


def run(args: argparse.Namespace) -> int:
    if not args.store:
        log.error("no model store: give --store or set HARP_STORE")
        return 2
    if bool(args.source) == bool(args.db):
        log.error("give exactly one of --source or --db")
        return 2
    if args.delimiter is not None and (args.db or args.source == "sacct"):
        log.error("--delimiter is for a saved sacct text file given to --source, not %s", args.db or "sacct")
        return 2
    origin = args.db or args.source
    if origin != "sacct" and (problem := input_problem(origin)) is not None:  # a FIFO is named so
        log.error("%s", problem)
        return 2
    # The clock a job store is read by and training then leaves jobs out by; for another source
    # (sacct may take minutes) taken once the store is held, as before (promotion's clock).
    now = time.time() if args.db else None
    try:
        records, stats = read_source(
            args.source, args.sacct_start, args.db, args.delimiter, newest=args.max_rows, now=now
        )
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
    return train_targets(records, targets, plan, every=args.target == ALL, now=now)
