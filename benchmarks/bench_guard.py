"""Benchmark: one `harp guard` poll over many running jobs, against reading the same listing.

    .venv/bin/python -m benchmarks.bench_guard [--jobs 10000] [--pending 0] [--polls 20]

Generates the `squeue -O` listing the guard reads (a third of the jobs shortened by harp in extend
or time_min mode, a tenth of those due for an extension, the rest plain or annotated; other tools'
text in some admin comments; ``--pending`` pending jobs as many of them tagged) and times, in one
run, with scontrol faked as instant:
- baseline: `str.split` of the same listing into fields (the floor of any reader);
- baseline: `json.loads` of the same jobs as `squeue --json` prints them (22.05: about 2.7 KB a job),
  the listing the guard does not use;
- Guard.poll: parsing, tags, following the tagged jobs' limits, site bounds (the reservations re-read
  as a job is due), the decisions and at most max_updates_per_poll updates;
- Guard.poll while a job the guard follows leaves or comes back every poll, as at a busy site: the
  state file then waits (guard.seen_file), written at most once a minute;
- the guard's state file written over: guard.seen_file.save of every job the guard follows.
Target: one poll over 10,000 running jobs in under 1 s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from slurm_harp.config import GuardSettings
from slurm_harp.guard import seen_file
from slurm_harp.guard.guard_metrics import GuardMetrics
from slurm_harp.guard.loop import Guard
from slurm_harp.guard.running import SQUEUE_ARGV
from slurm_harp.guard.slurm import CONFIG_ARGV, Completed


def clock(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def listing(jobs: int, pending: int = 0, seed: int = 11) -> str:
    rng = random.Random(seed)
    lines = []
    for i in range(jobs + pending):
        own = rng.choice((60, 120, 240, 720, 1440, 2880))
        kind = rng.random()
        if kind < 1 / 3:
            cut = max(1, own // rng.choice((2, 4, 8)))
            due = rng.random() < 0.1
            used = cut * 60 - (rng.randint(0, 100) if due else rng.randint(300, cut * 60))
            mode, flag = ("extend", "!") if rng.random() < 0.7 else ("time_min", "~")
            comment = f"harp:{mode},t{flag}={cut}/q0.9,t0={own},m=4000,v=time@20261101T000000Z"
            limit = cut
        else:
            limit, used = own, rng.randint(1, own * 60)
            comment = "harp:shadow,t=30,v=time@x" if kind < 0.6 else "(null)"
        if rng.random() < 0.05:
            comment += " jobstats|efficiency=0.4 note=other tools write here"
        state, nodes = ("R", f"c[{i % 500}-{i % 500 + 1}]") if i < jobs else ("PD", "")
        used = used if i < jobs else 0
        fields = (state, "0", "2026-11-27T10:00:00", clock(limit * 60), clock(max(used, 0)))
        association = "normal|harp|research|alice"
        lines.append(f"{1000 + i}|{'|'.join(fields)}|batch|{association}|(null)|{nodes}|N/A|{comment}|")
    return "\n".join(lines) + "\n"


def as_json(jobs: int) -> str:
    """The same number of jobs as `squeue --json` would print them (field names of 22.05)."""
    job = {f"field_{k}": ("x" * 40 if k % 3 else k) for k in range(60)}
    job.update({"job_id": 1, "time_limit": 60, "start_time": 1, "admin_comment": "harp:extend,t!=1,t0=5"})
    return json.dumps({"meta": {}, "errors": [], "jobs": [dict(job, job_id=i) for i in range(jobs)]})


class Slurm:
    def __init__(self, text: str) -> None:
        self.text = text
        self.updates = 0

    def __call__(self, argv: Sequence[str]) -> Completed:
        if tuple(argv) == SQUEUE_ARGV:
            return Completed(0, self.text, "")
        if argv[:2] == ("scontrol", "update"):
            self.updates += 1
        if tuple(argv) == CONFIG_ARGV:
            return Completed(0, "AccountingStorageEnforce = associations,limits\n", "")
        return Completed(0, "", "")


class ChurnedPoll:
    """A poll whose listing lacks, or has again, the first job the guard follows; ``writes``
    counts the polls that wrote the state file (a new file takes its place)."""

    def __init__(self, guard: Guard, slurm: Slurm, text: str) -> None:
        followed = next(line for line in text.split("\n") if ",t!=" in line) + "\n"
        self.listings = itertools.cycle([text.replace(followed, ""), text])
        self.guard, self.slurm = guard, slurm
        self.polls = self.writes = 0

    def __call__(self) -> None:
        state = self.guard.settings.state
        before = state.stat().st_ino if state.exists() else None
        self.slurm.text = next(self.listings)
        self.guard.poll()
        self.polls += 1
        self.writes += state.stat().st_ino != before


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=0, help="pending jobs listed besides")
    parser.add_argument("--polls", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # "N jobs due, 200 extended" at every poll is expected here
    text, payload = listing(args.jobs, args.pending), as_json(args.jobs + args.pending)
    split = timed(lambda: [line.split("|") for line in text.split("\n")], args.polls)
    loads = timed(lambda: json.loads(payload), args.polls)
    with tempfile.TemporaryDirectory() as tmp:
        slurm = Slurm(text)
        settings = GuardSettings(heartbeat=Path(tmp) / "hb", state=Path(tmp) / "limits.json")
        guard = Guard(settings, slurm, GuardMetrics(CollectorRegistry()))
        report = guard.poll()  # first poll: the site bounds are read too
        assert report is not None
        poll = timed(lambda: guard.poll(), args.polls)
        churned = ChurnedPoll(guard, slurm, text)
        churn = timed(churned, args.polls)
        followed = guard._lowered.seen
        save = timed(lambda: seen_file.save(settings.state, followed), args.polls)
        size = settings.state.stat().st_size
    print(f"{args.jobs:,} running jobs, {args.pending:,} pending: listing {len(text) / 1e6:.1f} MB "
          f"(squeue -O), {len(payload) / 1e6:.1f} MB as squeue --json")  # fmt: skip
    print(f"shortened by harp: {report.shortened:,}; due in a poll: {report.due:,}; "
          f"extended per poll at most: {guard.settings.max_updates_per_poll}")  # fmt: skip
    print(f"{'step':<44}{'median s':>10}{'x split':>9}")
    for name, seconds in (
        ("baseline: str.split of the listing", split),
        ("baseline: json.loads of squeue --json", loads),
        ("Guard.poll (parse, decide, extend)", poll),
        ("Guard.poll, a followed job gone or back", churn),
        (f"state file of {len(followed):,} jobs ({size / 1e6:.1f} MB)", save),
    ):
        print(f"{name:<44}{seconds:>10.3f}{seconds / split:>9.1f}")
    print(f"state file written in {churned.writes} of {churned.polls} polls with a followed job gone or back")
    verdict = "met" if poll < 1.0 else "MISSED"
    print(f"target: one poll over {args.jobs:,} jobs under 1 s: {verdict} ({poll:.3f} s)")


if __name__ == "__main__":
    main()
