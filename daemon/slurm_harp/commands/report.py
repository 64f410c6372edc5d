"""`harp report --db JOBSTORE --since 30d --out DIR`: what each mode would have done on the site's
own jobs, as an HTML page with plots (evaluation.site_report), read before switching rewriting on.

Exit status: 0 the page has figures (of time, or of memory and CPUs only); 1 the page says there is
nothing to report (no job in the window, none tagged, none with a prediction to compare); 2 the job
store or the configuration cannot be read, matplotlib is missing or cannot draw a plot (the page of
the run before is kept), or --out cannot be made, opened or written: a symbolic link on its path
owned by neither the caller nor root is refused (slurm_harp.output_dir; no page), a file that
cannot be written is named (no page either)."""

from __future__ import annotations

import argparse
import logging
import re
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

from slurm_harp.accounting.jobstore import JobStore, SchemaVersionError
from slurm_harp.commands.arguments import extra_needed, input_problem, policy_at, unix_time, writing_out
from slurm_harp.commands.publication import trainable
from slurm_harp.config import DEFAULT_PATH
from slurm_harp.core.job_copies import each_job_once
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.evaluation.site_report import site_report
from slurm_harp.evaluation.site_report_html import nothing_to_report, write_site_report
from slurm_harp.evaluation.site_report_plots import DrawError
from slurm_harp.output_dir import OutputDir

log = logging.getLogger(__name__)
AGO = re.compile(r"^([0-9]+)([dh])$")  # not \d: it takes any script's digits
UNIT_S = {"d": 86400, "h": 3600}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "report",
        help="an HTML report of what each mode would have done on the jobs that ran",
        description="Reads the job store's jobs that ended in the window and the tag harp left on "
        "each (in shadow mode: the limit it would have set), and writes DIR/index.html with its "
        "plots: predicted vs actual, waste and kills per partition and per mode. Viewable offline.",
    )
    p.add_argument("--db", required=True, help="the job store (`[history] db`, filled by harp harvest)")
    p.add_argument(
        "--since",
        type=since_time,
        default="30d",
        help="jobs that ended after: N days or hours ago (30d, 12h), or a UTC date or time "
        "(2026-10-01, 2026-10-01T08:00) (default: %(default)s)",
    )
    p.add_argument("--out", required=True, type=Path, help="directory for index.html and its images")
    p.add_argument(
        "--partition", action="append", default=[], help="only this partition (repeat for several)"
    )
    p.add_argument(
        "--config",
        help="TOML configuration whose policy (floors, min_gain) is applied to shadow values "
        f"(default: {DEFAULT_PATH} when it exists, else harp's defaults)",
    )
    p.set_defaults(func=run)


def since_time(text: str, now: float | None = None) -> int:
    """Unix time of ``text``: ``Nd``/``Nh`` before ``now``, or an ISO date or time (UTC unless it
    says otherwise)."""
    if match := AGO.match(text.strip()):
        ago = int(match[1]) * UNIT_S[match[2]] if len(match[1]) < 20 else float("inf")
        return unix_time((time.time() if now is None else now) - ago, text)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a window: {text!r} (give e.g. 30d, 12h, 2026-10-01 or 2026-10-01T08:00)"
        ) from None
    return unix_time(at if at.tzinfo else at.replace(tzinfo=UTC), text)


def run(args: argparse.Namespace) -> int:
    policy = policy_at(args.config)
    if policy is None:
        return 2
    db = Path(args.db)
    if not db.exists():
        print(f"harp report: no job store at {db} (the daemon's [history] db, filled by `harp harvest`)")
        return 2
    if (problem := input_problem(args.db)) is not None:  # a FIFO, a directory: named as what it is
        print(f"harp report: {problem}")
        return 2
    # --out opened before the store is read: a bad one is said at once
    return writing_out(args.out, _said, lambda out: _report(args, db, policy, out))


def _said(problem: str) -> None:
    print(f"harp report: {problem}")


def _report(args: argparse.Namespace, db: Path, policy: tuple[Policy, str], out: OutputDir) -> int:
    partitions = tuple(args.partition)
    try:
        with JobStore(db, readonly=True) as store:
            records = [
                r
                for r in store.records(ended_since=args.since)
                if not partitions or r.request.partition in partitions
            ]
        # a time no date holds ended the page in a traceback (year 27969: a trace imported before
        # the readers checked); left out as the nightly leaves it out of training; a job held under
        # two sources is one job, as in training (it doubled the jobs and kills on the page)
        records = each_job_once(trainable(records, time.time(), "the report"), "reported")
        report = site_report(records, policy[0], args.since, partitions)
    except (RuntimeError, SchemaVersionError, sqlite3.Error) as exc:
        print(f"harp report: cannot read the job store {db}: {exc}")
        return 2
    try:
        page = write_site_report(report, out, policy[1])
    except ImportError as exc:  # matplotlib comes with the train extra, as for harp evaluate
        print(f"harp report: {extra_needed(exc, 'the plots')}")
        return 2
    except DrawError as exc:
        print(f"harp report: {exc}")
        return 2
    problem = nothing_to_report(report)
    if problem is not None:
        print(f"harp report: {problem} ({page} says so)")
        return 1
    counts = f"{report.jobs:,} jobs, {report.tagged:,} tagged ({report.untagged:,} untagged skipped)"
    if report.timed == 0:  # memory or CPU predictions only
        figures = " and ".join(t.target.value for t in report.other_targets)
        print(f"{page}: {counts}; no time prediction to compare: the figures of {figures} only")
        return 0
    rewrite = next(r for r in report.modes if r.mode is Mode.REWRITE)
    extend = next(r for r in report.modes if r.mode is Mode.EXTEND)
    asked = report.modes[0].waste_core_h
    print(
        f"{page}: {counts}; waste {asked:,.0f} core-h as asked, {extend.waste_core_h:,.0f} in extend mode, "
        f"{rewrite.waste_core_h:,.0f} in rewrite mode, which kills {rewrite.killed:,} jobs"
    )
    return 0
