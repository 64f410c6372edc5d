"""`harp evaluate`: baselines and our strategy on a chronological split of a trace or the job store."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_harp.accounting import JobRecord, ReadStats, load_records
from slurm_harp.commands.arguments import (
    count,
    extra_needed,
    fraction,
    input_problem,
    rate,
    seed,
    writing_out,
)
from slurm_harp.commands.method import LADDER_ROWS, LEARNING_RATE, TREES, trees
from slurm_harp.commands.publication import trainable
from slurm_harp.config import REFIT
from slurm_harp.core.job_copies import each_job_once
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import BY
from slurm_harp.output_dir import OutputDir
from slurm_harp.simulation.trace import trace_name

if TYPE_CHECKING:
    from slurm_harp.evaluation.report import Context
    from slurm_harp.evaluation.runner import TargetReport

log = logging.getLogger(__name__)

TARGET_CHOICES = (*(t.value for t in Target), "all")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "evaluate",
        help="compare limit strategies on past jobs (train / validation / test by time)",
        description="Fit every strategy on the oldest jobs, calibrate it on the next window to the "
        "kill budget, and report on the most recent window: a table per target, and with --out a "
        "JSON of every figure and a PNG of the waste-cut vs newly-killed curves.",
    )
    p.add_argument("source", nargs="?", help="SWF (.swf/.swf.gz), Eagle CSV (.csv) or saved `sacct -P` text")
    p.add_argument("--db", help="read the job store (SQLite) at this path instead of a file")
    p.add_argument("--target", default="all", choices=TARGET_CHOICES, help="default: %(default)s")
    p.add_argument(
        "--kill-budget",
        type=fraction,
        default=0.01,
        help="fraction of newly killed jobs allowed (default: 0.01)",
    )
    p.add_argument(
        "--split", type=_fractions, default=(0.6, 0.2), help="train,validation fractions (default: 0.6,0.2)"
    )
    p.add_argument("--out", type=Path, help="write <trace>.md, <trace>.json and <trace>.png here")
    p.add_argument(
        "--strategies", default="all", help="comma-separated names, 'baselines' or 'all' (default)"
    )
    p.add_argument("--max-jobs", type=count, default=None, help="evaluate the most recent N jobs only")
    p.add_argument("--seed", type=seed, default=0, help="seed of the randomised baselines (default: 0)")
    p.add_argument(
        "--trees",
        type=trees,
        default=TREES,
        help="ours: boosting rounds of each quantile model, as `harp train --trees` (default: %(default)s)",
    )
    p.add_argument(
        "--learning-rate",
        type=rate,
        default=LEARNING_RATE,
        help="ours: LightGBM's, as `harp train --learning-rate` (default: %(default)s)",
    )
    p.add_argument(
        "--refit",
        choices=REFIT,
        default=REFIT[0],
        help="ours: how its models meet the test window, as `harp train --refit` (default: %(default)s)",
    )
    p.add_argument(
        "--ladder-rows",
        type=count,
        default=LADDER_ROWS,
        help="ours: the quantile ladder learns from at most N training jobs spread over the window, "
        "as `harp train --ladder-rows` (default: %(default)s)",
    )
    p.add_argument(
        "--calibrate-by",
        choices=BY,
        default=BY[0],
        help="ours: the safety rule's risks per partition too, as `harp train --calibrate-by` "
        "(default: %(default)s)",
    )
    p.set_defaults(func=run)


def _fractions(text: str) -> tuple[float, float]:
    try:
        train, validation = (float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'train,validation' fractions: {text!r}") from None
    if not (train > 0 and validation > 0 and train + validation < 1):  # NaN fails each test
        raise argparse.ArgumentTypeError(f"need train > 0, validation > 0, train + validation < 1: {text!r}")
    return train, validation


def _read(args: argparse.Namespace, stats: ReadStats) -> list[JobRecord]:
    """The jobs to evaluate, each once (core.job_copies, as training reads them): a job held under
    two sources of the job store counted twice in every figure."""
    if args.db:
        records = _read_store(args.db)
    else:
        records = load_records(args.source, stats)
        log.info("%s", stats.summary())
    return each_job_once(records, "evaluated")


def _no_job(origin: str, stats: ReadStats, db: bool) -> str:
    """Why nothing is evaluated when no job was read, with the reader's counts."""
    if db:
        return f"{origin}: no job in the job store to evaluate"
    lines = f"{stats.lines} line{'s' * (stats.lines != 1)}"
    if stats.bad_lines == stats.lines > 0:  # harp import says it alike, and exits 1
        return f"{origin}: no job read, every line bad ({lines}): not the format its name says?"
    counts = f"{lines}, {stats.bad_lines} bad, {stats.skipped} skipped"
    return f"{origin}: no job read ({counts}): nothing to evaluate"


def _none_usable(origin: str, read: int, kept: int, dropped: int) -> str:
    """Why nothing is evaluated once the split dropped every job: of the ``read``, --max-jobs
    ``kept`` the latest with a submit time (without it, all), and the split ``dropped`` those."""
    jobs = f"the {read} job{'s' * (read != 1)} read"
    if kept == 0:  # --max-jobs keeps only jobs with a submit time
        return f"{origin}: no job to evaluate: none of {jobs} has a submit time"
    of = f"the {kept} --max-jobs kept of {jobs}" if kept < read else jobs
    return f"{origin}: no job to evaluate: {dropped} dropped (no run time or submit time) of {of}"


def _read_store(db: str) -> list[JobRecord]:
    """The store's jobs, read only: the harvest and the daemon may be using it, and opened to
    write it would be migrated under them."""
    from slurm_harp.accounting.jobstore import JobStore

    with JobStore(db, readonly=True) as store:  # SchemaVersionError (a ValueError): no job store
        # out as the nightly leaves them out of training: a time past 9999 ended the table
        return trainable(list(store.records()), time.time(), "the evaluation")


def run(args: argparse.Namespace) -> int:
    if bool(args.db) == bool(args.source):
        log.error("give exactly one of SOURCE (a file) or --db PATH")
        return 2
    origin = args.db or args.source
    if (problem := input_problem(origin)) is not None:
        log.error("%s", problem)
        return 2
    names = _outputs(trace_name(origin))
    return writing_out(args.out, log.error, lambda out: _evaluate(args, origin, out), names)


def _evaluate(args: argparse.Namespace, origin: str, out: OutputDir | None) -> int:
    # Imported here: the evaluation needs the training extra, the daemon's commands do not.
    from slurm_harp.evaluation import lineup, report
    from slurm_harp.evaluation.runner import evaluate_target
    from slurm_harp.evaluation.split import chronological_split
    from slurm_harp.evaluation.strategy import Strategy

    stats = ReadStats(source=origin)
    try:
        names = lineup.parse_names(args.strategies)
        records = _read(args, stats)
    except (OSError, ValueError, sqlite3.Error) as exc:
        log.error("cannot evaluate %s: %s", origin, exc)
        return 2
    if not records:  # a report of nothing would look finished: said, nothing written
        log.error("%s", _no_job(origin, stats, bool(args.db)))
        return 1
    read = len(records)
    if args.max_jobs:
        records = sorted((r for r in records if r.request.submit_time is not None), key=_submit)[
            -args.max_jobs :
        ]
    timeline = chronological_split(records, args.split)
    if not timeline.jobs:  # every job dropped: a report of nothing would look finished too
        log.error("%s", _none_usable(origin, read, len(records), timeline.dropped))
        return 1
    ctx = report.Context(
        trace=trace_name(origin),
        source=str(origin),
        kill_budget=args.kill_budget,
        fractions=args.split,
        timeline=timeline,
        input_jobs=len(records),
    )
    print(
        f"{ctx.trace}: {len(timeline.jobs)} jobs ({timeline.dropped} dropped: no run time or submit time); "
        + ", ".join(f"{w} {b - a}" for w, (a, b) in timeline.windows().items())
    )
    targets = list(Target) if args.target == "all" else [Target(args.target)]
    ours = {
        "trees": args.trees,
        "learning_rate": args.learning_rate,
        "refit": args.refit,
        "ladder_rows": args.ladder_rows,
        "calibrate_by": args.calibrate_by,
    }
    results: list[TargetReport] = []
    for target in targets:
        strategies: list[Strategy] = []
        unavailable: dict[str, str] = {}
        for name in names:
            try:
                strategies.append(lineup.build(name, target, seed=args.seed, ours_options=ours))
            except lineup.Unavailable as exc:
                unavailable[name] = str(exc)
        result = evaluate_target(timeline, target, strategies, args.kill_budget)
        result.unavailable = unavailable
        results.append(result)
        print(report.table(result, ctx))
    if all(r.skipped is not None for r in results):  # a report of skipped targets would look finished
        log.error("%s", _all_skipped(origin, results))
        return 1
    if out is not None:
        return _write(out, ctx, results)
    return 0


def _all_skipped(origin: str, results: list[TargetReport]) -> str:
    """Why nothing is evaluated when every target was skipped (too few jobs to score)."""
    why = "; ".join(f"{r.target.value}: {r.skipped}" for r in results)
    return f"{origin}: no target to evaluate, nothing written: {why}"


def _submit(record: JobRecord) -> int:
    return record.request.submit_time or 0


def _outputs(trace: str) -> list[str]:
    """Every file a run writes into --out: the table that says it is whole, the JSON, the plot."""
    return [f"{trace}{suffix}" for suffix in (".md", ".json", ".png")]


def _write(out: OutputDir, ctx: Context, results: list[TargetReport]) -> int:
    """Write the JSON, the plot and the table last over an earlier run's (``OutputDir.write_run``);
    2 (the tables kept, said) without matplotlib."""
    from slurm_harp.evaluation import report, report_plot

    table, document, plot = _outputs(ctx.trace)
    missing, note = None, ""
    try:
        png = report_plot.draw(results, ctx)
        note = "" if png is not None else " (nothing to plot)"
    except (ValueError, RuntimeError, OverflowError) as exc:  # matplotlib's; the figures are written
        log.warning("plot not drawn: %s: %s", out / plot, exc)
        png, note = None, " (plot not drawn)"
    except ImportError as exc:  # matplotlib comes with the train extra, as for harp report
        png, missing = None, extra_needed(exc, "the plot")
    files: dict[str, str | bytes] = {document: json.dumps(report.document(results, ctx), indent=1) + "\n"}
    if png is not None:
        files[plot] = png
    text = "\n".join(report.table(r, ctx) for r in results)
    written = out.write_run(files, table=(table, text), names=_outputs(ctx.trace))
    print("wrote " + ", ".join(str(p) for p in written) + note)
    if missing is not None:
        log.error("%s", missing)
        return 2
    return 0
