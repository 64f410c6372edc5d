"""Study: how much waste one limit per group could cut at the kill budget, chosen in hindsight.

    .venv/bin/python -m tests.bench.study_bound [--traces KTH,SDSC,CTC,LANL] [--target time]

For each trace's test window (`harp evaluate`'s 60 / 20 / 20 split) the jobs are grouped by user,
by user and job name (SWF: executable), and by user, name and requested value. Each group gets
one limit, picked on the test window itself so that the whole window's waste cut is the largest
with at most 1 % of its jobs newly killed (an exact knapsack over the groups). No predictor can
choose so: it is a ceiling for any rule that gives a group's jobs one limit, and a measure of
how repetitive a site's usage is. The smaller the groups, the closer each is to knowing every
job's outcome, so the finest grouping is the loosest ceiling. Figures are scored with `harp
evaluate`'s own cost functions. The README quotes them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import FLOOR, Observed, observe
from tests.bench.common import per_trace, shared_timeline

BUDGET = 0.01
Option = tuple[int, float, float]  # (newly killed jobs, waste left, limit) for one group


def group_options(obs: Observed, max_kills: int) -> list[Option]:
    """Every useful limit for one group's jobs: each distinct whole-unit usage (at least the
    floor) and the floor itself, with the jobs it newly kills and the waste it leaves; those
    killing more than ``max_kills`` are left out. Keeping every request (limit inf) is first."""
    options: list[Option] = [(0, costs.waste(obs, obs.requested), float("inf"))]
    done = costs.finished(obs)
    floor = FLOOR[obs.target]
    # Between two of these, a higher limit only leaves more waste; below them all, every job dies.
    values = np.unique(np.append(np.maximum(np.ceil(obs.actual[done]), floor), floor))
    for limit in values[::-1]:
        effective = costs.effective_limits(obs, np.full(len(obs), limit))
        kills = int(np.sum(costs.newly_killed(obs, effective)))
        if kills > max_kills:
            break
        options.append((kills, costs.waste(obs, effective), float(limit)))
    return options


def best_limits(options: Sequence[Sequence[Option]], max_kills: int) -> list[float]:
    """One limit per group (from its options) whose waste left is the least in total with at
    most ``max_kills`` jobs newly killed: a knapsack over the groups, exact."""
    least = np.full(max_kills + 1, np.inf)  # least waste left with exactly k kills so far
    least[0] = 0.0
    picks = []
    for group in options:
        new = np.full(max_kills + 1, np.inf)
        pick = np.zeros(max_kills + 1, dtype=np.int64)
        for i, (kills, left, _) in enumerate(group):
            moved = np.full(max_kills + 1, np.inf)
            moved[kills:] = least[: max_kills + 1 - kills] + left
            better = moved < new
            new[better], pick[better] = moved[better], i
        least = new
        picks.append(pick)
    k = int(np.argmin(least))
    chosen = [0.0] * len(options)
    for g in range(len(options) - 1, -1, -1):
        kills, _, limit = options[g][int(picks[g][k])]
        chosen[g] = limit
        k -= kills
    return chosen


def hindsight_bound(obs: Observed, groups: Sequence[Hashable], budget: float = BUDGET) -> tuple[float, float]:
    """(waste cut %, newly killed %) of the best one-limit-per-group rule on the usable jobs."""
    use = np.flatnonzero(obs.usable())
    sub, keys = obs.take(use), [groups[int(i)] for i in use]
    max_kills = int(budget * len(sub))
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    index = [np.array(m) for m in members.values()]
    chosen = best_limits([group_options(sub.take(m), max_kills) for m in index], max_kills)
    limits = np.full(len(sub), np.nan)
    for m, limit in zip(index, chosen, strict=True):
        limits[m] = np.nan if np.isinf(limit) else limit
    full = np.full(len(obs), np.nan)
    full[use] = limits
    return costs.waste_cut_pct(obs, full), 100.0 * costs.killed_fraction(obs, full)


GROUPINGS: dict[str, Callable[[JobRecord, Target], Hashable]] = {
    "user": lambda job, _: job.request.user_name,
    "user + name": lambda job, _: (job.request.user_name, job.request.job_name),
    "user + name + request": lambda job, target: (
        job.request.user_name,
        job.request.job_name,
        job.request.requested(target),
    ),
}


def study(trace: str, target: Target) -> None:
    path, timeline = shared_timeline(trace)
    test = timeline.jobs[timeline.split.validation_end :]
    obs = observe(test, target)
    print(f"{path.name}, {target.value}: {int(obs.usable().sum())} usable test jobs")
    for label, key in GROUPINGS.items():
        keys = [key(job, target) for job in test]
        cut, killed = hindsight_bound(obs, keys)
        print(f"  one limit per {label:22} {len(set(keys)):6d} groups  {cut:5.1f} % cut / {killed:.2f} %")


def main() -> None:
    per_trace(__doc__ or "", study, "KTH,SDSC,CTC,LANL")


if __name__ == "__main__":
    main()
