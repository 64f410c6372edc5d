"""The hindsight ceiling: the most waste one limit per group of jobs could cut at the kill budget.

Each group (e.g. a user's jobs in the test window) gets one limit, picked on the window itself so
that the window's waste cut is the largest with at most the budget's share of its jobs newly
killed (CPUs: slowed). The search is exact: each group's useful limits (its jobs' whole-unit
usages and the floor) are its options, and a knapsack over the groups spends the kill budget
where it saves the most. Figures come from the evaluation's own cost functions.

No predictor can choose so, since it reads the outcomes. So it bounds any rule that gives a
group's jobs one limit, and it measures how repetitive a site's usage is: a strategy near its
ceiling per user tells a user's jobs apart about as well as knowing that user's usage would; to
pass it, a strategy must tell them apart better. The finer the groups, the nearer each is to
knowing every job's outcome, and the looser the ceiling.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from slurm_harp.core.job import JobRecord
from slurm_harp.evaluation import costs
from slurm_harp.evaluation.observed import FLOOR, Observed

Option = tuple[int, float, float]  # (newly killed jobs, waste left, limit) for one group
Key = Callable[[JobRecord], Hashable]

# The groupings `harp evaluate` reports, coarsest first.
GROUPINGS: dict[str, Key] = {
    "user": lambda job: job.request.user_name,
    "user + name": lambda job: (job.request.user_name, job.request.job_name),
}


def group_options(obs: Observed, max_kills: int) -> list[Option]:
    """Every useful limit for one group's jobs: each distinct whole-unit usage (at least the
    floor) and the floor itself, with the jobs it newly kills and the waste it leaves; those
    killing more than ``max_kills`` are left out. Keeping every request (limit inf) is first."""
    options: list[Option] = [(0, costs.waste(obs, obs.requested), float("inf"))]
    floor = FLOOR[obs.target]
    # Between two of these, a higher limit only leaves more waste; below them all, every job dies.
    done = costs.finished(obs)
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


def ceiling(obs: Observed, groups: Sequence[Hashable], budget: float) -> tuple[float, float, int]:
    """(waste cut %, newly killed or slowed %, number of groups) of the best one-limit-per-group
    rule on the usable jobs of ``obs``; ``groups`` holds each job's group, row for row."""
    use = np.flatnonzero(obs.usable())
    sub, keys = obs.take(use), [groups[int(i)] for i in use]
    max_kills = int(budget * len(sub))
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        members.setdefault(key, []).append(i)
    index = [np.array(m) for m in members.values()]
    chosen = best_limits([group_options(sub.take(m), max_kills) for m in index], max_kills)
    limits = np.full(len(obs), np.nan)
    for m, limit in zip(index, chosen, strict=True):
        if np.isfinite(limit):
            limits[use[m]] = limit
    return costs.waste_cut_pct(obs, limits), 100.0 * costs.killed_fraction(obs, limits), len(index)


def ceilings(jobs: Sequence[JobRecord], obs: Observed, budget: float) -> dict[str, dict[str, float]]:
    """``ceiling`` for each of GROUPINGS on ``jobs`` (observed as ``obs``, row for row): per
    grouping its cut %, lost % and number of groups among the usable jobs."""
    out: dict[str, dict[str, float]] = {}
    for name, key in GROUPINGS.items():
        cut, lost, count = ceiling(obs, [key(job) for job in jobs], budget)
        out[name] = {"waste_cut_pct": cut, "lost_pct": lost, "groups": float(count)}
    return out
