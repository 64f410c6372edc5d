"""Benchmark: what refreshing the outcome gauges costs the daemon, per harvest.

    .venv/bin/python -m benchmarks.bench_outcome_refresh [--jobs 300000] [--added 500] [--repeat 5]

The history feed refreshes the outcome gauges (server/outcome_metrics.py) after each poll that
found rows added, in the daemon's process: the Python it runs holds the interpreter that Predict
calls need. A job store of --jobs generated jobs, each with a harp tag, ended over 20 days
(benchmarks.bench_gc_pause); the gauges cover 7 days. Prints median ms over --repeat rounds of:
- reading the whole window in one query, as every refresh did before the figures were kept per
  hour: the baseline;
- a daemon's first refresh, which reads every hour of the window;
- a refresh after the harvester added --added jobs that ended within the last hour;
- a refresh that finds nothing changed;
- the per-hour signature query alone (SQLite, no row read in Python).
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from benchmarks.bench_gc_pause import NOW, jobs
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.evaluation.outcomes import outcomes
from slurm_harp.server.outcome_metrics import OutcomeMetrics

VERSION = "20261101T000000.000000Z"
WINDOW_S = 7 * 86400


def tagged(n: int, first: int, end: int | None = None) -> list[JobRecord]:
    tag = f"harp:rewrite,t!=60,t0=600,v={VERSION}"
    rng = random.Random(first)
    out = [replace(r, harp_tag=tag) for r in jobs(n, first, rng)]
    return out if end is None else [replace(r, end_time=end - i % 3000) for i, r in enumerate(out)]


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return (time.perf_counter() - started) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=300_000)
    ap.add_argument("--added", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    owner = {VERSION: Target.TIME}.get
    took: dict[str, list[float]] = {
        name: [] for name in ("before", "whole", "added", "unchanged", "signatures")
    }
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "jobs.sqlite"
        with JobStore(db) as writer:
            writer.merge(tagged(args.jobs, 0), "sacct")
            with JobStore(db, readonly=True) as store:
                gauges = OutcomeMetrics(
                    CollectorRegistry(), owner, window_s=WINDOW_S, clock=lambda: float(NOW)
                )
                gauges.refresh(store, force=True)
                in_window = sum(o.jobs for o in gauges._figures.values())
                rows = functools.partial(store.records, ended_since=NOW - WINDOW_S, tagged=True)
                for round_ in range(args.repeat):
                    fresh = OutcomeMetrics(
                        CollectorRegistry(), owner, window_s=WINDOW_S, clock=lambda: float(NOW)
                    )
                    took["before"].append(timed(lambda: outcomes(rows(), owner)))
                    took["whole"].append(timed(functools.partial(fresh.refresh, store, force=True)))
                    first = args.jobs + round_ * args.added
                    writer.merge(tagged(args.added, first, end=NOW - 1), "sacct")
                    took["added"].append(timed(lambda: gauges.refresh(store, force=True)))
                    took["unchanged"].append(timed(lambda: gauges.refresh(store, force=True)))
                    took["signatures"].append(timed(lambda: store.tagged_hours(NOW - WINDOW_S)))
    print(f"{args.jobs:,} tagged jobs in the store, {in_window:,} of them in the 7-day window")
    print(f"median ms of {args.repeat} rounds")
    labels = {
        "before": "each refresh before: one read of the whole window",
        "whole": "a first refresh: every hour of the window read",
        "added": f"a refresh after {args.added} jobs were added",
        "unchanged": "a refresh with nothing changed",
        "signatures": "the per-hour signature query alone",
    }
    for name, label in labels.items():
        print(f"{label:<50} {statistics.median(took[name]):>9.1f}")


if __name__ == "__main__":
    main()
