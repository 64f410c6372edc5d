"""Study: how much waste one limit per group could cut at the kill budget, chosen in hindsight.

    .venv/bin/python -m experiments.study_bound [--traces KTH,SDSC,CTC,LANL] [--target time]

For each trace's test window (`harp evaluate`'s 60 / 20 / 20 split) the jobs are grouped by user,
by user and job name (SWF: executable), and by user, name and requested value, and each grouping's
hindsight ceiling is printed (evaluation/ceiling.py: one limit per group, picked on the test window
itself for the largest cut with at most 1 % newly killed). `harp evaluate` reports the first two;
the third, finer one is the loosest. Then the seconds `harp evaluate`'s ceilings take on the trace.
The README quotes these figures.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from experiments.common import per_trace, shared_timeline
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.evaluation.ceiling import GROUPINGS, Key, ceiling, ceilings
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.runner import MIN_WINDOW_JOBS

BUDGET = 0.01


def study(trace: str, target: Target) -> None:
    path, timeline = shared_timeline(trace)
    test = timeline.jobs[timeline.split.validation_end :]
    obs = observe(test, target)
    print(f"{path.name}, {target.value}: {int(obs.usable().sum())} usable test jobs")

    def with_request(job: JobRecord) -> Hashable:
        return (job.request.user_name, job.request.job_name, job.request.requested(target))

    groupings: dict[str, Key] = {**GROUPINGS, "user + name + request": with_request}
    for label, key in groupings.items():
        cut, killed, count = ceiling(obs, [key(job) for job in test], BUDGET)
        print(f"  one limit per {label:22} {count:6d} groups  {cut:5.1f} % cut / {killed:.2f} %")
    started = time.perf_counter()
    for each in Target:  # what `harp evaluate` adds to a run: its two groupings on every target
        seen = observe(test, each)
        if seen.usable().sum() >= MIN_WINDOW_JOBS:
            ceilings(test, seen, BUDGET)
    print(f"  harp evaluate's ceilings, every target: {time.perf_counter() - started:.1f} s")


def main() -> None:
    per_trace(__doc__ or "", study, "KTH,SDSC,CTC,LANL")


if __name__ == "__main__":
    main()
