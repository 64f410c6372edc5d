"""Benchmark: a full `harp train` on 1 M jobs, wall time and peak RSS, against a baseline run.

    .venv/bin/python -m benchmarks.bench_train [--jobs 1000000] [--trace LANL] [--threads 2]
                                                [--variants baseline,time,all,...]

A real trace (default LANL-CM5: it has run times, memory and CPU time) is extended by
time-shifted copies (the whole trace again after it ends, same users) and written as one SWF file.
Each variant is a separate `harp train` process (peak RSS is its own):
- baseline: the issue-2 training: three quantile models (0.5, 0.9, 0.95) of 200 trees at a
  learning rate of 0.05, time only, no comparison models;
- time: today's default `harp train` (the quantile ladder, HARP's asymmetric Huber, E-Loss,
  linear, tree and MLP, WTM choice, calibrated rule), time only;
- all: the same for every target the data has (`--target all`: time and CPUs; memory too in
  the runs recorded before training left a trace's per-processor memory out);
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
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import train_argv
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


def extend(trace: Path, jobs: int, out: Path) -> int:
    """Write ``jobs`` SWF lines: the trace's jobs, then time-shifted copies of them."""
    lines = []
    with gzip.open(trace, "rt") as handle:
        for line in handle:
            if line.strip() and not line.startswith(";"):
                lines.append(line.split())
    first = min(float(f[1]) for f in lines)
    span = max(float(f[1]) + max(float(f[2]), 0) + max(float(f[3]), 0) for f in lines) - first + 86400
    written = 0
    with out.open("w") as handle:
        copy = 0
        while written < jobs:
            shift = copy * span
            for fields in lines:
                if written >= jobs:
                    break
                fields = list(fields)
                fields[0] = str(written + 1)
                fields[1] = str(int(float(fields[1]) + shift))
                handle.write(" ".join(fields) + "\n")
                written += 1
            copy += 1
    return written


def run(source: Path, store: Path, args: list[str], threads: int) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one `harp train` process (os.wait4: its own rusage)."""
    argv = train_argv(source, store, "--threads", str(threads), *args)
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
    parser.add_argument("--variants", default="baseline,time,all,all-norefit,all-fast")
    args = parser.parse_args()
    trace = next(iter(sorted(SHARED_TRACES.glob(f"{args.trace}*.swf.gz"))), None)
    if trace is None:
        sys.exit(f"no trace {args.trace}* in {SHARED_TRACES}")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "extended.swf"
        n = extend(trace, args.jobs, source)
        print(f"{n} jobs from {trace.name} (time-shifted copies), {args.threads} threads")
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
