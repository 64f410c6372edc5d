"""How long the simulator takes on a 100k-job trace, per scheduler x limit source, on one core.

The trace: the SDSC-SP2 and CTC-SP2 cleaned logs from the shared traces (``--traces``), each
shifted to start at time 0 and merged onto one machine of both sizes (128 + 338 = 466 processors),
first 100,000 jobs by submit time (without the shared traces: the bundled KTH-SP2 trace four times
back to back). That machine rarely builds a queue. ``--load 4`` divides every submit time by 4:
four times the work offered in the same time, an overloaded machine whose queue grows to tens of
thousands of jobs, where a scheduler's cost per event grows with the queue.
The ours-* sources need predictions: here a synthetic array shaped like a calibrated rule's, only to
exercise the modes' code paths (kills, extensions) at this scale: 95 % of jobs get their run time
times a factor in [1, 3], 5 % a factor in [0.3, 1) (too short: killed in rewrite, extended in the
other modes); fixed seed.
Each run is a fresh process pinned to one CPU, so its time and peak RSS are its own. The plain
request EASY run is the baseline, measured in the same invocation.

    .venv/bin/python -m benchmarks.bench_simulate [--jobs 100000] [--load 1] [--schedulers easy,slurm]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from slurm_harp.simulation import Workload, catalog, load_workload, measure, simulate
from slurm_harp.simulation.engine import Scheduler, Simulation
from tests.conftest import BUNDLED_TRACE, SHARED_TRACES

MERGED = ("SDSC-SP2-1998-4.2-cln.swf.gz", "CTC-SP2-1996-3.1-cln.swf.gz")
TARGET_SECONDS = 60.0
TARGET_RSS_MIB = 2048.0


def trace(count: int, load: float = 1.0, traces: Path = SHARED_TRACES) -> Workload:
    paths = [traces / name for name in MERGED]
    parts = [load_workload(p) for p in paths] if all(p.is_file() for p in paths) else []
    if not parts:
        kth = load_workload(BUNDLED_TRACE)
        parts = [kth] * 4
        span = kth.submit[-1] - kth.submit[0] + 1
        offsets = [k * span - kth.submit[0] for k in range(4)]
        processors = kth.processors
    else:
        offsets = [-w.submit[0] for w in parts]
        processors = sum(w.processors for w in parts)
    rows = []
    for k, (w, offset) in enumerate(zip(parts, offsets, strict=True)):
        # Users of different traces are different people.
        base = k * (1 + max(w.user))
        rows += [
            (
                f"{k}.{w.ids[i]}",
                (w.submit[i] + offset) / load,
                w.run[i],
                w.request[i],
                w.procs[i],
                w.user[i] + base,
            )
            for i in range(len(w))
        ]
    name = f"{len(parts)} traces merged" + (f", submit times / {load:g}" if load != 1 else "")
    return Workload.build(processors, rows, name=name).head(count)


def synthetic_predictions(w: Workload) -> list[float]:
    import numpy as np

    rng = np.random.default_rng(0)
    short = rng.random(len(w)) < 0.05
    factor = np.where(short, rng.uniform(0.3, 1.0, len(w)), rng.uniform(1.0, 3.0, len(w)))
    return [max(1.0, r * f) for r, f in zip(w.run, factor.tolist(), strict=True)]


class Watched:
    """A scheduler that notes the longest queue it was called with."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.name = inner.name
        self.longest = 0

    def schedule(self, sim: Simulation) -> float | None:
        self.longest = max(self.longest, len(sim.queue))
        return self.inner.schedule(sim)

    def head_reservation(self, sim: Simulation) -> float | None:
        return self.inner.head_reservation(sim)


def one(scheduler: str, limits: str, count: int, load: float, traces: Path) -> dict[str, object]:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    w = trace(count, load, traces)
    predictions = synthetic_predictions(w) if limits.startswith("ours-") else None
    watched = Watched(catalog.scheduler(scheduler))
    t0 = time.perf_counter()
    result = simulate(w, watched, catalog.limits(limits, w, predictions))
    seconds = time.perf_counter() - t0
    m = measure(result)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "scheduler": scheduler,
        "limits": limits,
        "jobs": len(w),
        "processors": w.processors,
        "trace": w.name,
        "seconds": seconds,
        "rss_mib": rss_mib,
        "mean_bsld": m.mean_bsld,
        "longest_queue": watched.longest,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--load", type=float, default=1.0, help="divide every submit time by this (default: 1)")
    p.add_argument("--traces", type=Path, default=SHARED_TRACES, help="the shared traces' folder")
    p.add_argument("--schedulers", default=",".join(catalog.SCHEDULERS))
    p.add_argument("--limits", default=",".join(catalog.LIMITS))
    p.add_argument("--one", nargs=2, metavar=("SCHEDULER", "LIMITS"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        scheduler, limits = args.one
        print(json.dumps(one(scheduler, limits, args.jobs, args.load, args.traces)))
        return 0
    pairs = [("easy", "request")] + [
        (s, lim)
        for s in args.schedulers.split(",")
        for lim in args.limits.split(",")
        if (s, lim) != ("easy", "request")
    ]
    rows = []
    for s, lim in pairs:
        argv = [sys.executable, "-m", "benchmarks.bench_simulate", "--jobs", str(args.jobs)]
        argv += ["--load", str(args.load), "--traces", str(args.traces), "--one", s, lim]
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.splitlines()[-1]))
        r = rows[-1]
        if len(rows) == 1:
            print(f"trace: {r['trace']}, {r['jobs']} jobs on {r['processors']} processors; one core each")
            header = f"{'scheduler':<10}{'limits':<16}{'seconds':>9}{'x baseline':>12}"
            print(header + f"{'peak RSS MiB':>14}{'bsld':>9}{'longest queue':>15}")
        ratio = float(r["seconds"]) / float(rows[0]["seconds"])
        print(
            f"{r['scheduler']:<10}{r['limits']:<16}{r['seconds']:>9.1f}{ratio:>12.2f}"
            f"{r['rss_mib']:>14.0f}{r['mean_bsld']:>9.1f}{r['longest_queue']:>15,}",
            flush=True,
        )
    worst = max(rows, key=lambda r: float(r["seconds"]))
    heaviest = max(float(r["rss_mib"]) for r in rows)
    met = float(worst["seconds"]) <= TARGET_SECONDS and heaviest < TARGET_RSS_MIB
    print(
        f"slowest: {worst['scheduler']} / {worst['limits']} {float(worst['seconds']):.1f} s; peak RSS "
        f"{heaviest:.0f} MiB; target <= {TARGET_SECONDS:.0f} s and < {TARGET_RSS_MIB:.0f} MiB: "
        + ("met" if met else "MISSED")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
