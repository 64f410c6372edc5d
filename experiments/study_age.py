"""Study: does a fresher fit help? Ours fitted at two ages, scored on the same last jobs.

    .venv/bin/python -m experiments.study_age [--traces KTH,SDSC,CTC,LANL] [--target time]

`harp evaluate` fits every strategy once, when its test window (the last 20 % of the jobs) opens,
and keeps it for the whole window; the nightly retraining refits every day. Here ours
(HarpStrategy, as `harp evaluate` fits it) is fitted twice, with `harp evaluate`'s 60 / 20 shape
ending at 0.8 n and moved forward to end at 0.9 n, and both are scored on the last 10 % of the
jobs: how much the age of a fit costs in waste cut and kill rate. experiments/tried.md quotes it.
"""

from __future__ import annotations

from experiments.common import per_trace, shared_timeline
from slurm_harp.core.request import Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.ours import HarpStrategy
from slurm_harp.evaluation.strategy import Split

BUDGET = 0.01
SCORED = 0.9  # the last 10 % of the jobs are scored
FITS = {"fitted at 0.8 n": (0.6, 0.8), "fitted at 0.9 n": (0.7, 0.9)}  # (train end, validation end)


def study(trace: str, target: Target) -> None:
    path, timeline = shared_timeline(trace)
    jobs = timeline.jobs
    n, start = len(jobs), int(SCORED * len(jobs))
    obs = observe(jobs[start:], target)
    print(f"{path.name}, {target.value}: {int(obs.usable().sum())} scored jobs")
    for label, (train_end, validation_end) in FITS.items():
        ours = HarpStrategy(target)
        ours.fit(jobs, Split(int(train_end * n), int(validation_end * n)), BUDGET)
        limits = ours.limits(jobs, start)
        cut, killed = costs.waste_cut_pct(obs, limits), 100.0 * costs.killed_fraction(obs, limits)
        print(f"  {label}: {cut:5.1f} % cut / {killed:.2f} % newly killed", flush=True)


def main() -> None:
    per_trace(__doc__ or "", study, "KTH,SDSC,CTC,LANL")


if __name__ == "__main__":
    main()
