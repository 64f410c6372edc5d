"""Benchmark: a full `harp train` on 1 M jobs, wall time and peak RSS, against a baseline run.

    .venv/bin/python -m benchmarks.bench_train [--jobs 1000000] [--trace LANL] [--threads 2]
                                                [--processors-per-node 1]
                                                [--variants baseline,time,all,...]

A real trace (default LANL-CM5: it has run times, memory and CPU time, so every target trains)
is extended by time-shifted copies (the whole trace again after it ends, same users) and written
into a job store (SQLite), which `harp train --db` reads as the nightly does. Each job is given
its memory per node, as a sacct record carries it: a node count (the trace's processors over
``--processors-per-node``, 1 by default: the archive's CM-5 and SP2 nodes each had one) and its
peak per processor times the processors on its node. An SWF file's memory is per processor,
which training leaves out (learning.targets.per_node_only), and memory would not train.
Each variant is a separate `harp train` process (peak RSS is its own):
- baseline: the issue-2 training: three quantile models (0.5, 0.9, 0.95) of 200 trees at a
  learning rate of 0.05, time only, no comparison models;
- time: today's default `harp train` (the quantile ladder, HARP's asymmetric Huber, E-Loss,
  linear, tree and MLP, WTM choice, calibrated rule), time only;
- all: the same for every target the data has (`--target all`: time, memory, CPUs);
- all-norefit: the same without refitting the published models on every job (`--no-refit`);
- all-fast: every target with half the trees at twice the learning rate (`--trees 100
  --learning-rate 0.1`), a site's setting for a shorter nightly run;
- all-update: every target, the published models continued on the validation window's jobs
  instead of fitted again on every job (`--refit update`);
- all-ladder300k: every target, the quantile ladder fitted on 300 k training jobs instead of the
  default 100 k (`--ladder-rows 300000`; both spread over the training window).
Targets from the issue: <= 5 min and <= 4 GiB on 2 cores. Prints each run and its ratio to the
baseline.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.common import train_argv
from slurm_harp.accounting import read_swf
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.job import JobRecord
from tests.conftest import SHARED_TRACES

LIMIT_S = 300.0
LIMIT_MB = 4096.0
VARIANTS: dict[str, list[str]] = {
    "baseline": [
        *("--target", "time", "--quantiles", "0.5,0.9,0.95", "--compare", "none"),
        *("--trees", "200", "--learning-rate", "0.05"),
    ],
    "time": ["--target", "time"],
    "all": ["--target", "all"],
    "all-norefit": ["--target", "all", "--no-refit"],
    "all-fast": ["--target", "all", "--trees", "100", "--learning-rate", "0.1"],
    "all-update": ["--target", "all", "--refit", "update"],
    "all-ladder300k": ["--target", "all", "--ladder-rows", "300000"],
}


def per_node(record: JobRecord, processors_per_node: int) -> JobRecord:
    """``record`` as sacct would give it: a node count, and the peak memory of a node (the SWF
    peak per processor times the processors on the node); the request stays per CPU, which
    JobRequest.requested reads per node once it has the node count. The processors are the
    requested ones, as that request's: use and request keep the trace's ratio."""
    processors = record.request.min_cpus or record.cores
    nodes = math.ceil(processors / processors_per_node)
    peak = None if record.max_rss_mb is None else record.max_rss_mb * processors / nodes
    return replace(record, max_rss_mb=peak, request=replace(record.request, min_nodes=nodes))


def shifted(record: JobRecord, seconds: int, job_id: int) -> JobRecord:
    def later(t: int | None) -> int | None:
        return None if t is None else t + seconds

    request = replace(record.request, submit_time=later(record.request.submit_time))
    return replace(
        record,
        job_id=str(job_id),
        request=request,
        start_time=later(record.start_time),
        end_time=later(record.end_time),
    )


def extend(trace: Path, jobs: int, db: Path, processors_per_node: int) -> int:
    """Write ``jobs`` jobs into the job store ``db``: the trace's, then time-shifted copies of
    them, each with its memory per node (per_node); one transaction per copy."""
    base = [per_node(r, processors_per_node) for r in read_swf(trace)]
    first = min(r.request.submit_time or 0 for r in base)
    span = max(r.end_time or r.request.submit_time or 0 for r in base) - first + 86400
    written = 0
    with JobStore(db) as store:
        for copy in range(math.ceil(jobs / len(base))):
            part = base[: jobs - written]
            store.merge([shifted(r, copy * span, written + k + 1) for k, r in enumerate(part)], "bench")
            written += len(part)
    return written


def run(db: Path, store: Path, args: list[str], threads: int) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one `harp train` process (os.wait4: its own rusage)."""
    argv = train_argv(db, store, "--threads", str(threads), *args, db=True)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        process = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode != 0:
            print(err.read()[-2000:], file=sys.stderr)
        for line in out.read().splitlines():
            if "published" in line or "rule" in line or "chosen" in line:
                print("    " + line.strip())
    return wall, usage.ru_maxrss / 1024.0, process.returncode


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--trace", default="LANL", help="a trace name prefix under the shared traces")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--processors-per-node", type=int, default=1, help="the trace's processors on one node (default: 1)"
    )
    parser.add_argument("--variants", default="baseline,time,all,all-norefit,all-fast")
    args = parser.parse_args()
    trace = next(iter(sorted(SHARED_TRACES.glob(f"{args.trace}*.swf.gz"))), None)
    if trace is None:
        sys.exit(f"no trace {args.trace}* in {SHARED_TRACES}")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "extended.sqlite"
        n = extend(trace, args.jobs, source, args.processors_per_node)
        print(
            f"{n} jobs from {trace.name} (time-shifted copies; processors per node: "
            f"{args.processors_per_node}), {args.threads} threads"
        )
        results: dict[str, tuple[float, float, int]] = {}
        for name in args.variants.split(","):
            print(f"  {name}: harp train {' '.join(VARIANTS[name])}")
            results[name] = run(source, Path(tmp) / f"store-{name}", VARIANTS[name], args.threads)
    base = results.get("baseline")
    print(
        f"\n{'variant':14} {'wall s':>8} {'peak MB':>8} {'x base':>7}  "
        f"targets: <= {LIMIT_S:.0f} s, <= {LIMIT_MB:.0f} MB"
    )
    for name, (wall, peak, code) in results.items():
        ratio = f"{wall / base[0]:.2f}" if base and base[0] > 0 else "-"
        ok = (
            "ok"
            if code == 0 and wall <= LIMIT_S and peak <= LIMIT_MB
            else "MISSED"
            if code == 0
            else f"exit {code}"
        )
        print(f"{name:14} {wall:8.1f} {peak:8.0f} {ratio:>7}  {ok}")


if __name__ == "__main__":
    main()
