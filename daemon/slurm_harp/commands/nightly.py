"""`harp nightly`: harvest -> train every target -> promote what is not worse, from the daemon's config.

Run by deploy/systemd/slurm-harp-nightly.timer. Each step is crash-safe on its own: the harvest
commits each sacct window with its cursor in one SQLite transaction; a version is published under
a temp name and renamed; CURRENT moves by an atomic rename, only after the promotion verdict. A
failed harvest stops the chain (training on a store that stopped growing would only repeat the
last night); a target without enough data is skipped. The daemon picks up a promotion by itself.
One nightly at a time: the model store's writer lock (model.store) is taken before the harvest and
held to the end. A second run (the timer's while an admin's runs) exits STORE_BUSY (75) at once,
before it calls sacct or reads the job store; it would only have repeated the first's work.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sqlite3
import time

from slurm_harp.accounting import JobRecord
from slurm_harp.accounting.jobstore import JobStore, SchemaVersionError, store_error
from slurm_harp.commands import harvest as harvest_command
from slurm_harp.commands import method, publication
from slurm_harp.commands.arguments import config_option, settings_at, span
from slurm_harp.config import Settings
from slurm_harp.core.request import Target

log = logging.getLogger(__name__)

OVERLAP_S = 3600
SETTLE_S = 60


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("nightly", help="harvest sacct, retrain every target, promote if not worse")
    config_option(p, "the daemon's config")
    p.add_argument(
        "--skip-harvest", action="store_true", help="train on the job store as it is (no sacct call)"
    )
    p.add_argument(
        "--settle-seconds",
        type=span(1, zero=True),
        default=SETTLE_S,
        help="leave jobs that ended this recently to the next harvest (default: %(default)s)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_at(args.config)
    if settings is None:
        return 2
    db = settings.history.db
    if db is None:
        log.error(
            "%s: history.db is not set: nightly harvests into and trains from that job store", args.config
        )
        return 2
    with contextlib.ExitStack() as held:
        # Before the harvest: a second run must not query sacct and load the job store into
        # memory beside the first, only to find the store busy when it comes to train.
        refused = publication.hold_store(held, settings.store, "not harvesting or training")
        if refused is not None:
            return refused
        return _harvest_and_train(args, settings, str(db))


def _harvest_and_train(args: argparse.Namespace, settings: Settings, db: str) -> int:
    started = time.monotonic()
    if not args.skip_harvest and not harvest_command.harvest_into(
        db, source="sacct", overlap_s=OVERLAP_S, settle_s=int(max(0.0, args.settle_seconds))
    ):
        log.error("the harvest failed: not retraining tonight")
        return 1
    log.info("harvest done in %.1f s", time.monotonic() - started)
    now, newest = time.time(), settings.training.max_jobs
    try:
        with JobStore(db, readonly=True) as store:
            # Not every row: the store is never pruned, and reading it whole outgrew MemoryMax.
            records = list(store.training_records(newest, now))
            log.info(
                "read %d of the job store's %d jobs: the newest %d and those their history can see",
                len(records),
                store.count(),
                newest,
            )
    except SchemaVersionError as exc:  # names the store and its schema_version
        log.error("not training: %s", exc)
        return 1
    except sqlite3.Error as exc:
        log.error("not training: %s", store_error(db, exc)[0])
        return 1
    except OSError as exc:
        log.error("cannot read the job store %s: %s", db, exc)
        return 1
    code = _train(settings, records, now)
    log.info("nightly done in %.1f s (exit %d)", time.monotonic() - started, code)
    return code


def _train(settings: Settings, records: list[JobRecord], now: float) -> int:
    from slurm_harp.learning.fitting import Refit
    from slurm_harp.learning.pipeline import Plan

    t = settings.training
    config = method.method_config(
        method.quantiles(method.QUANTILES),
        method.names(method.COMPARE),
        method.selection(method.SELECT),
        t.kill_budget,
        1.0,
        t.threads,
        t.trees,
        t.learning_rate,
        t.ladder_rows,
        t.calibrate_by,
    )
    plan = Plan(
        store=settings.store,
        config=config,
        source=str(settings.history.db),
        max_rows=t.max_jobs,
        promote="auto",
        tolerance=t.tolerance,
        keep=t.keep,
        refit=Refit(t.refit),
        policy=settings.policy,  # promotion judges by the limits the daemon sets under it
    )
    return publication.train_held(records, list(Target), plan, every=True, now=now)  # run() holds the store
