"""Benchmark: `sacct -P` text -> JobRecords -> job store, against plain splitting of the same lines.

    .venv/bin/python -m benchmarks.bench_harvest [--lines 100000]

Generates realistic sacct lines (each job followed by its .batch and .extern steps; arrays, het
jobs, every end state, sentinels) into a temporary file, then times, in one run:
- baseline: reading the file and `str.split("|")` of every line (the floor of any parser);
- baseline: `csv.reader` with delimiter "|";
- read_sacct: parsing, validating and folding steps into JobRecords;
- upsert: one transaction into a fresh store, then the same batch again (the idempotent no-op case).
Prints lines/s per stage, the parse/split ratio and the peak RSS of the process after each stage.
"""

from __future__ import annotations

import argparse
import csv
import random
import resource
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from slurm_harp.accounting import SACCT_FIELDS, ReadStats, read_sacct
from slurm_harp.accounting.jobstore import JobStore

STATES = [("COMPLETED", 70), ("FAILED", 10), ("CANCELLED by 1000", 8), ("TIMEOUT", 7), ("OUT_OF_MEMORY", 3)]
STATES += [("NODE_FAIL", 1), ("PREEMPTED", 1)]


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    text = time.strftime("%H:%M:%S", time.gmtime(rest))
    return f"{days}-{text}" if days else text


def generate(path: Path, lines: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    base = int(datetime.fromisoformat("2024-03-01T00:00:00").timestamp())
    states, weights = zip(*STATES, strict=True)
    written = 0
    job_id = 100_000
    with path.open("w") as out:
        out.write("|".join(SACCT_FIELDS) + "\n")
        while written < lines:
            job_id += 1
            user = rng.randrange(200)
            cpus = rng.choice((1, 2, 4, 8, 16, 32, 64))
            nodes = 1 if cpus <= 32 else 2
            limit = rng.choice((10, 30, 60, 120, 240, 1440, 2880))
            state = rng.choices(states, weights)[0]
            elapsed = limit * 60 if state == "TIMEOUT" else int(limit * 60 * rng.random() ** 2) + 1
            submit = base + job_id * 7
            start = submit + rng.randrange(3600)
            end = start + elapsed
            times = [time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) for t in (submit, start, end)]
            display = f"{job_id}_{rng.randrange(100)}" if rng.random() < 0.1 else str(job_id)
            mem = rng.choice(("4000M", "16G", "2Gc", "64000M", "0"))
            rss = rng.randrange(1, 60_000) * 1024 * 1024
            cpu = _duration(int(elapsed * cpus * rng.random()))
            tres = f"billing={cpus},cpu={cpus},mem={mem},node={nodes}"
            if rng.random() < 0.1:
                tres += ",gres/gpu=4"
            job = {
                "JobIDRaw": str(job_id), "JobID": display, "JobName": f"app{rng.randrange(500)}",
                "User": f"user{user}", "UID": str(1000 + user), "Account": f"acct{user % 20}",
                "Partition": rng.choice(("batch", "gpu", "debug")), "QOS": "normal", "State": state,
                "ExitCode": "0:0", "ElapsedRaw": str(elapsed), "TimelimitRaw": str(limit), "ReqMem": mem,
                "ReqCPUS": str(cpus), "AllocCPUS": str(cpus), "NNodes": str(nodes), "ReqNodes": str(nodes),
                "TotalCPU": cpu, "ReqTRES": tres, "Submit": times[0], "Start": times[1], "End": times[2],
                "WorkDir": f"/home/user{user}/run{rng.randrange(50)}", "Flags": "SchedBackfill",
            }  # fmt: skip
            out.write(_line(job))
            for step, step_rss in (("batch", rss), ("extern", 1_000_000)):
                row = {
                    "JobIDRaw": f"{job_id}.{step}", "JobID": f"{display}.{step}", "JobName": step,
                    "State": state.split()[0], "ExitCode": "0:0", "ElapsedRaw": str(elapsed),
                    "MaxRSS": str(step_rss), "ReqCPUS": str(cpus), "AllocCPUS": str(cpus),
                    "NNodes": str(nodes), "NTasks": "1", "ReqNodes": str(nodes), "TotalCPU": cpu,
                    "Submit": times[0], "Start": times[1], "End": times[2],
                }  # fmt: skip
                out.write(_line(row))
            written += 3
    return written


def _line(fields: dict[str, str]) -> str:
    """One line of `sacct -P` output in SACCT_FIELDS' order (a field not given is empty)."""
    return "|".join(fields.get(name, "") for name in SACCT_FIELDS) + "\n"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def timed(label: str, lines: int, work: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    work()
    seconds = time.perf_counter() - t0
    print(f"{label:34} {seconds:7.3f} s {lines / seconds:12,.0f} lines/s   peak RSS {peak_rss_mb():6.0f} MB")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harp-bench-") as tmp:
        path = Path(tmp) / "sacct.txt"
        lines = generate(path, args.lines)
        size_mb = path.stat().st_size / 1e6
        print(
            f"{lines:,} sacct -P lines ({size_mb:.1f} MB), {lines // 3:,} jobs; "
            f"start RSS {peak_rss_mb():.0f} MB"
        )

        def split_lines() -> None:
            with path.open() as handle:
                for line in handle:
                    line.rstrip("\n").split("|")

        def csv_lines() -> None:
            with path.open(newline="") as handle:
                for _ in csv.reader(handle, delimiter="|", quoting=csv.QUOTE_NONE):
                    pass

        records = []

        def parse() -> None:
            with path.open() as handle:
                records.extend(read_sacct(handle, stats))

        stats = ReadStats(source=str(path))
        base = timed("baseline: str.split", lines, split_lines)
        timed("baseline: csv.reader", lines, csv_lines)
        parsed = timed("read_sacct -> JobRecords", lines, parse)
        assert stats.bad_lines == 0 and len(records) == lines // 3, stats.summary()
        with JobStore(Path(tmp) / "jobs.sqlite") as store:
            first = timed("upsert (new rows, 1 transaction)", lines, lambda: store.merge(records, "bench"))
            again = timed("upsert again (no change)", lines, lambda: store.merge(records, "bench"))
            assert store.count() == len(records)
        print(f"read_sacct / str.split time ratio: {parsed / base:.1f}x")
        total = parsed + first
        print(
            f"parse + upsert: {total:.2f} s = {lines / total:,.0f} lines/s, "
            f"{len(records) / total:,.0f} jobs/s"
        )
        print(
            f"upserts: {len(records) / first:,.0f} new jobs/s, {len(records) / again:,.0f} unchanged jobs/s"
        )


if __name__ == "__main__":
    main()
