"""Study: the test window served as the nightly retraining serves it, by fits renewed as it goes.

    .venv/bin/python -m experiments.study_rolling [--traces KTH,SDSC,CTC,LANL] [--target time]
        [--periods 4] [--validation moved|quarter]

`harp evaluate` fits every strategy once, when its test window (the last 20 % of the jobs) opens,
and keeps it for the whole window. In production `harp nightly` fits and calibrates again every
night. Here the test window is cut into ``--periods`` parts of as many jobs, and each part is served
by a fit made when it opens. ``--validation moved`` (the default): `harp evaluate`'s split moved
forward by as many jobs (the validation window keeps its size; training grows); the first part's fit
is `harp evaluate`'s own, so with ``--periods 1`` the figures are the reports'. ``--validation
quarter``: the validation window is the last quarter of the jobs submitted by then (int(0.75 x its
end) jobs train, as 60 / 20 does up to rounding: on KTH-SP2 and LANL-CM5 the first fit trains on one job
fewer than the report's). Ours and tsafrir-scaled (its multiplier chosen again on each fit's validation
window) are scored on the whole test window: waste cut % / newly killed % (CPUs: slowed %), and each
part's kill rate. experiments/tried.md quotes it.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np

from experiments.common import shared_timeline, study_parser
from slurm_harp.core.request import Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.baselines import ScaledTsafrirStrategy
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.ours import HarpStrategy
from slurm_harp.evaluation.split import Timeline
from slurm_harp.evaluation.strategy import Split, Strategy

BUDGET = 0.01
STRATEGIES: dict[str, Callable[[Target], Strategy]] = {
    "ours": HarpStrategy,
    "tsafrir-scaled": ScaledTsafrirStrategy,
}


def period_starts(timeline: Timeline, periods: int) -> list[int]:
    """The first job of each part of the test window, and its end."""
    start, n = timeline.split.validation_end, len(timeline.jobs)
    return [int(v) for v in np.linspace(start, n, periods + 1).round()]


def fit_split(timeline: Timeline, first: int, validation: str) -> Split:
    """The split of the fit that serves the jobs from ``first`` on (see ``--validation``)."""
    if validation == "quarter":
        return Split(int(0.75 * first), first)
    return Split(timeline.split.train_end + first - timeline.split.validation_end, first)


def renewed_limits(
    timeline: Timeline, make: Callable[[Target], Strategy], target: Target, bounds: list[int], validation: str
) -> np.ndarray:
    """Limits for the jobs of the test window, each part's from a strategy fitted when it opens."""
    jobs, parts = timeline.jobs, []
    for first, end in pairwise(bounds):
        strategy = make(target)
        strategy.fit(jobs, fit_split(timeline, first, validation), BUDGET)
        parts.append(strategy.limits(jobs, first)[: end - first])
    return np.concatenate(parts)


def study(trace: str, target: Target, periods: int, validation: str) -> None:
    path, timeline = shared_timeline(trace)
    jobs = timeline.jobs
    bounds = period_starts(timeline, periods)
    obs = observe(jobs[bounds[0] :], target)
    print(f"{path.name}, {target.value}: {int(obs.usable().sum())} test jobs, {periods} fits ({validation})")
    for name, kind in STRATEGIES.items():
        limits = renewed_limits(timeline, kind, target, bounds, validation)
        cut, killed = costs.waste_cut_pct(obs, limits), 100.0 * costs.killed_fraction(obs, limits)
        offsets = [b - bounds[0] for b in bounds]
        each = [
            100.0 * costs.killed_fraction(obs.take(slice(a, b)), limits[a:b]) for a, b in pairwise(offsets)
        ]
        shown = " ".join(f"{k:.2f}" for k in each)
        lost = "slowed" if target is Target.CPUS else "killed"
        print(f"  {name:15} {cut:5.1f} % cut / {killed:.2f} % {lost}; per part {lost}: {shown}", flush=True)


def main() -> None:
    parser = study_parser(__doc__ or "", "KTH,SDSC,CTC,LANL")
    parser.add_argument("--periods", type=int, default=4, help="fits over the test window")
    parser.add_argument("--validation", default="moved", choices=("moved", "quarter"))
    args = parser.parse_args()
    for trace in args.traces.split(","):
        study(trace, Target(args.target), args.periods, args.validation)


if __name__ == "__main__":
    main()
