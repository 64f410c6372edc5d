"""`harp simulate`: replay a trace under a backfill scheduler with each limit source, and report
waits, bounded slowdown, utilisation and kills (a table; with --out Markdown, JSON and plots)."""

from __future__ import annotations

import argparse
import logging
import math
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from slurm_harp.commands.arguments import (
    count,
    extra_needed,
    fraction,
    input_problem,
    policy_at,
    span,
    whole,
    writing_out,
)
from slurm_harp.commands.predictions import check_matched, fitted_predictions, read_predictions
from slurm_harp.config import DEFAULT_PATH
from slurm_harp.core.policy import Policy
from slurm_harp.core.request import Target
from slurm_harp.output_dir import OutputDir

if TYPE_CHECKING:
    from slurm_harp.simulation.schedule_report import Run

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from slurm_harp.core.extension import WINDOW_DAYS, ConditionalRatios
    from slurm_harp.simulation import catalog
    from slurm_harp.simulation.backfill import BF_INTERVAL, BF_MAX_JOB_TEST, BF_RESOLUTION, BF_WINDOW

    p = subparsers.add_parser(
        "simulate",
        help="replay a trace under EASY or Slurm-like backfilling with each limit source",
        description="Jobs arrive at their submit time with their processors and time limit and run "
        "for their real run time or until their limit kills them. The scheduler plans with limits "
        "from each source in turn: the request, Tsafrir's (tsafrir, easy++), or slurm-harp's "
        "predictions in each mode (ours-*: need --predictions).",
    )
    p.add_argument(
        "source", help="SWF (.swf/.swf.gz), Eagle CSV (.csv), `sacct -P` text, or with --db the job store"
    )
    p.add_argument("--db", action="store_true", help="SOURCE is the job store (SQLite)")
    p.add_argument("--scheduler", choices=catalog.SCHEDULERS, default="easy", help="default: %(default)s")
    p.add_argument(
        "--limits",
        type=_names,
        default=("request", "easy++"),
        help=f"comma-separated, from {','.join(catalog.LIMITS)} (default: request,easy++)",
    )
    p.add_argument(
        "--predictions",
        type=Path,
        help="ours-*: predicted limits, JSON {job id: seconds} or CSV job_id,seconds (default: fitted "
        "along the trace as nightly retraining would: the calibrated rule for rewrite, the median "
        "model for time_min and extend); the policy turns them into limits as the daemon does",
    )
    p.add_argument(
        "--config",
        help="ours-*: the TOML configuration whose policy turns predictions into limits (the time "
        "floor, min_gain, require_history; default: "
        f"{DEFAULT_PATH} when it exists, else harp's defaults)",
    )
    p.add_argument(
        "--quantile",
        type=fraction,
        default=0.5,
        help="ours-time_min, ours-extend fitted along the trace: the model quantile planned with "
        '(policy.quantile with policy.limits = "quantile"; default: %(default)s)',
    )
    p.add_argument(
        "--extension",
        choices=("steps", "conditional"),
        default="conditional",
        help="ours-time_min, ours-extend: how a job nearing its planned limit is extended, by harp "
        "guard's own rule and lead: by Tsafrir's steps (guard extension = 'steps'), or to the "
        f"{ConditionalRatios.QUANTILE} quantile of run time / prediction of the jobs that ended in the "
        f"last {WINDOW_DAYS} days after outliving the same multiple of their prediction (the "
        "guard's default, 'conditional'; default here: %(default)s)",
    )
    p.add_argument(
        "--period-days",
        type=span(86400),
        default=30.0,
        help="ours-*, fitted along the trace: days between refits (default: %(default)s)",
    )
    p.add_argument(
        "--processors", type=count, help="machine size (default: the SWF header's, else the widest job)"
    )
    p.add_argument(
        "--warmup", type=fraction, default=0.01, help="fraction of first jobs not measured (default: 0.01)"
    )
    p.add_argument("--max-jobs", type=count, help="simulate the first N jobs only")
    p.add_argument(
        "--bf-max-job-test",
        type=count,
        default=BF_MAX_JOB_TEST,
        help="slurm: jobs tested per pass (default: %(default)s)",
    )
    p.add_argument(
        "--bf-resolution", type=count, default=BF_RESOLUTION, help="slurm: seconds (default: %(default)s)"
    )
    p.add_argument(
        "--bf-window", type=count, default=BF_WINDOW // 60, help="slurm: minutes (default: %(default)s)"
    )
    p.add_argument(
        "--bf-interval",
        type=whole,
        default=BF_INTERVAL,
        help="slurm: seconds between passes (default: %(default)s)",
    )
    p.add_argument("--out", type=Path, help="write <trace>-<scheduler>.md, .json and two PNGs here")
    p.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    p.set_defaults(func=run)


def _names(text: str) -> tuple[str, ...]:
    from slurm_harp.simulation import catalog

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in catalog.LIMITS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown limit source(s) {unknown}; from {', '.join(catalog.LIMITS)}"
        )
    return names


class Progress:
    """A plain-text progress line on stderr, redrawn in place."""

    def __init__(self, label: str, stream: IO[str], unit: str = "jobs") -> None:
        self.label = label
        self.stream = stream
        self.unit = unit
        self.t0 = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        share = done / total if total else 1.0
        bar = "#" * int(30 * share)
        elapsed = time.monotonic() - self.t0
        self.stream.write(f"\r{self.label:<24} [{bar:<30}] {done}/{total} {self.unit} {elapsed:5.1f}s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def run(args: argparse.Namespace) -> int:
    if (problem := input_problem(args.source)) is not None:
        log.error("%s", problem)
        return 2
    policy = policy_at(args.config)
    if policy is None:
        return 2
    from slurm_harp.simulation.trace import trace_name

    stem = f"{trace_name(args.source)}-{args.scheduler}"  # as load_workload names the jobs
    return writing_out(args.out, log.error, lambda out: _simulate(args, out, policy), _outputs(stem))


def _simulate(args: argparse.Namespace, out: OutputDir | None, policy: tuple[Policy, str]) -> int:
    from slurm_harp.simulation import catalog, load_workload, measure, simulate
    from slurm_harp.simulation.limits import as_set
    from slurm_harp.simulation.schedule_report import Run, document_json, table
    from slurm_harp.simulation.workload import predictions_by_id, predictions_by_job

    ours = [n for n in args.limits if n.startswith("ours-")]
    show = args.progress or sys.stderr.isatty()
    try:
        jobs = load_workload(args.source, args.processors, db=args.db)
        replayed = jobs.name
        if args.max_jobs and args.max_jobs < len(jobs):
            jobs = jobs.head(args.max_jobs)
            replayed = f"the first {len(jobs):,} jobs of {jobs.name} (--max-jobs)"
        predictions: dict[str, list[float]] = {}
        if ours and args.predictions:
            from_file = read_predictions(args.predictions)
            check_matched(args.predictions, from_file, jobs.ids, replayed)
            predictions = {name: predictions_by_id(jobs, from_file) for name in ours}
        elif ours:
            fitting = Progress("fitting along the trace", sys.stderr, "fits") if show else None
            fitted = fitted_predictions(
                args, set(zip(jobs.ids, jobs.submit, strict=True)), policy[0], fitting
            )
            predictions = {name: predictions_by_job(jobs, by_job) for name, by_job in fitted.items()}
    except (OSError, ValueError, sqlite3.Error) as exc:
        log.error("cannot simulate %s: %s", args.source, exc)
        return 2
    if predictions:
        floor = policy[0].floors.get(Target.TIME, 0.0)
        print(f"ours: policy from {policy[1]}: time floor {floor:g} min, min_gain {policy[0].min_gain:g}")
    for name, predicted in list(predictions.items()):
        predictions[name] = as_set(predicted, jobs, policy[0])
        given = sum(not math.isnan(p) for p in predicted)
        lowered = sum(
            p < r for p, r in zip(predictions[name], jobs.request, strict=True) if not math.isnan(p)
        )
        print(f"{name}: predictions for {given} of {len(jobs)} jobs; the policy lowers {lowered} limits")
    dropped = "".join(f"; {v} dropped: {k}" for k, v in jobs.dropped.items())
    unasked = f"{len(jobs.no_request)} asking for no limit, " if jobs.no_request else ""
    print(
        f"{jobs.name}: {len(jobs)} jobs on {jobs.processors} processors, {unasked}"
        f"scheduler {args.scheduler}{dropped}"
    )
    runs = []
    for name in args.limits:
        scheduler = catalog.scheduler(
            args.scheduler,
            bf_max_job_test=args.bf_max_job_test,
            bf_resolution=args.bf_resolution,
            bf_window=args.bf_window * 60,
            bf_interval=args.bf_interval,
        )
        source = catalog.limits(name, jobs, predictions.get(name), extension=args.extension)
        progress = Progress(f"{args.scheduler} / {name}", sys.stderr) if show else None
        result = simulate(jobs, scheduler, source, progress=progress)
        runs.append(Run(result, measure(result, args.warmup)))
    command = (
        "harp simulate " + " ".join(shlex.quote(a) for a in sys.argv[2:])
        if sys.argv[1:2] == ["simulate"]
        else None
    )
    text = table(runs, command)
    print(text)
    if out is not None:
        document = document_json(runs, command)
        return _write(out, f"{jobs.name}-{args.scheduler}", text, document, runs, args.warmup)
    return 0


def _outputs(stem: str) -> list[str]:
    """Every file a run writes into --out: the table that says it is whole, the JSON, the plots."""
    return [f"{stem}{suffix}" for suffix in (".md", ".json", "-waits.png", "-bsld.png")]


def _write(out: OutputDir, stem: str, table: str, document: str, runs: list[Run], warmup: float) -> int:
    """Write the JSON, the plots and the table last over an earlier run's (``OutputDir.write_run``);
    2 (the tables kept, said) without matplotlib."""
    from slurm_harp.simulation.schedule_report import draw

    try:
        pngs, missing = draw(runs, stem, warmup), None
    except ImportError as exc:  # matplotlib comes with the train extra, as for harp report
        pngs, missing = {}, extra_needed(exc, "the plots")
    written = out.write_run(
        {f"{stem}.json": document, **pngs}, table=(f"{stem}.md", table), names=_outputs(stem)
    )
    print("wrote " + ", ".join(str(p) for p in written))
    if missing is not None:
        log.error("%s", missing)
        return 2
    return 0
