"""The advice replayed on a trace: how often a site's history allows it, and what it would save.

Each job of a test window meets the advice as `harp advise` would have met it at its submission:

- Evidence: the runs of its user and job name that had ended by then (core.job.ended_by), the
  newest ``newest`` by submit time (the daemon reads its job store so); evidence.evidence_of uses
  the completed ones. Coverage: the job's user and name had completed runs at one size or more,
  at two sizes or more (only then does the log-log fit price sizes the user did not run).
- Its own cost: the billed rate of the CPUs it held times its elapsed hours. The traces carry no
  TRESBillingWeights, so ``flat_tariff`` bills CPUs at 1 an hour: costs are core-hours.
- The advice (recommend.advise) in one partition, ``SITE``, whose MaxTime is the caller's ``cap``
  (partitions' limits are not in the traces): its cheapest option (no deadline), and its cheapest
  whose longest run ends within the job's own time request (known at submission; none without
  one). Only completed jobs are scored: a failed or cancelled run is not the work a full run does.
- Two costs of an answer. Quoted: the advice's expected cost, from the fit's run times, reruns
  after a kill at the limit included. Replayed: the job's own run time moved to the answer's size
  along the fitted slope (``T x (answer / own size) ** slope``), run under the answer's limit with
  HARP's reruns (reexecution.charged_minutes), as rate x minutes. At the job's own size the replay
  is exact (the run time is observed); at another size it is an estimate, since that run time is
  not observed; and it is made only where the fit spans the job's own size. A job without an
  answer keeps its own cost.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_harp.advice.evidence import evidence_of
from slurm_harp.advice.option import Option
from slurm_harp.advice.recommend import Ask, advise
from slurm_harp.advice.reexecution import charged_minutes
from slurm_harp.advice.sizing import Scaling
from slurm_harp.advice.tariff import PartitionTariff, Tariff
from slurm_harp.core.accuracy import cut_pct
from slurm_harp.core.job import JobRecord

__all__ = ["SITE", "History", "Pick", "Replay", "flat_tariff", "replay", "site_cap", "summarise"]

SITE = "site"  # the one partition the replay prices in
Figures = dict[str, float | None]


def flat_tariff(cap_minutes: float) -> Tariff:
    """SITE billed by its CPUs (no TRESBillingWeights) at 1 per CPU-hour, MaxTime ``cap_minutes``."""
    return Tariff(
        partitions={SITE: PartitionTariff(weights=None, price=1.0, max_minutes=math.ceil(cap_minutes))}
    )


def site_cap(jobs: Iterable[JobRecord]) -> float:
    """A MaxTime for a trace that names none: the longest request or run time of ``jobs`` in
    minutes (the site let a job ask for it or run that long)."""
    return max(max(j.request.time_limit_minutes or 0, j.elapsed_s / 60.0) for j in jobs)


class History:
    """A trace's jobs by user and job name, ordered by end time: the runs each job's advice reads."""

    def __init__(self, jobs: Iterable[JobRecord]) -> None:
        groups: defaultdict[tuple[str, str], list[JobRecord]] = defaultdict(list)
        for job in jobs:
            user, name = job.request.user_name, job.request.job_name
            if user is not None and name is not None and job.end_time is not None:
                groups[user, name].append(job)
        self._groups = {key: sorted(group, key=_end) for key, group in groups.items()}
        self._ends = {key: [_end(j) for j in group] for key, group in self._groups.items()}

    def before(self, job: JobRecord, newest: int) -> list[JobRecord]:
        """The runs of ``job``'s user and name that had ended by its submission (at or before it),
        the newest ``newest`` of them by submit time; none without a user, name or submit time."""
        key, submit = (job.request.user_name, job.request.job_name), job.request.submit_time
        if key[0] is None or key[1] is None or submit is None or key not in self._groups:
            return []
        ended = self._groups[key][: bisect.bisect_right(self._ends[key], submit)]  # type: ignore[index]
        if len(ended) <= newest:
            return ended
        return heapq.nlargest(newest, ended, key=lambda j: j.request.submit_time or 0)


def _end(job: JobRecord) -> int:
    assert job.end_time is not None
    return job.end_time


@dataclass(frozen=True, slots=True)
class Pick:
    """One priced option of the advice, for one job (costs in the tariff's currency)."""

    size: int
    limit_minutes: float  # its first time limit
    quoted: float  # expected cost under the fit's run times, reruns included
    minutes: float | None  # the job's run time moved to this size; None: the fit does not span its size
    replayed: float | None  # that run under this limit, reruns included (inf: past the cap)


@dataclass(frozen=True, slots=True)
class Replay:
    """One test job and what the advice would have told its user."""

    sizes: int  # distinct sizes of the completed runs of its user and name before its submission
    size: int  # the CPUs it held
    minutes: float  # its run time
    cost: float  # what it cost: the rate of its CPUs x its elapsed hours
    completed: bool
    slope: float | None = None  # the fit's slope (runs at two sizes or more)
    own: Pick | None = None  # the advice's option at the job's own size (None: not priced, not asked)
    cheapest: Pick | None = None  # the cheapest option, no deadline
    in_deadline: Pick | None = None  # the cheapest sure to end within the job's time request


def replay(job: JobRecord, runs: Sequence[JobRecord], tariff: Tariff) -> Replay:
    """``job`` (priced in SITE of ``tariff``) with ``runs``, the history its advice would have read
    (History.before). The advice is asked only for a completed job with evidence."""
    size, minutes = int(job.cores), job.elapsed_s / 60.0
    cost = tariff.cost(SITE, {"cpu": size}, minutes / 60.0)
    sizes = len(evidence_of(job.request, runs, gpu=False).sizes())
    completed = job.state == "COMPLETED"
    if sizes == 0 or not completed:
        return Replay(sizes, size, minutes, cost, completed)
    deadline = job.request.time_limit_minutes
    advice = advise(Ask(job.request, partitions=(SITE,), deadline_minutes=deadline), runs, tariff, {})
    fit = Scaling.fit(advice.evidence.runs)
    assert fit is not None  # sizes > 0: the advice has runs

    def pick(option: Option | None) -> Pick | None:
        if option is None or option.quote is None:
            return None
        quote = option.quote
        limit = quote.configuration.limit_minutes
        if not fit.low <= size <= fit.high:
            return Pick(option.size, limit, quote.expected_cost, None, None)
        moved = minutes * (option.size / size) ** fit.slope
        replayed = quote.rate * charged_minutes(limit, quote.cap_minutes, moved) / 60.0
        return Pick(option.size, limit, quote.expected_cost, moved, replayed)

    own = next((o for o in advice.options if o.size == size and _finishes(o)), None)
    cheapest = advice.pareto[0] if advice.pareto else None  # the Pareto set is sorted by cost
    slope = fit.slope if sizes > 1 else None
    return Replay(
        sizes, size, minutes, cost, completed, slope, pick(own), pick(cheapest), pick(advice.cheapest)
    )


def _finishes(option: Option) -> bool:
    return option.quote is not None and option.quote.p_unfinished == 0.0


def summarise(replays: Sequence[Replay]) -> Figures:
    """Coverage, savings and the model check over a test window's replays (costs in the tariff's
    currency, shares in %). Savings are scored on completed jobs with evidence: ``s1_`` all of
    them, ``s2_`` those with runs at two sizes or more, ``s2neg_`` those whose fit has a negative
    slope, ``s1neg_`` all but the fits with slope >= 0. docs/advice.md names each figure."""
    out: Figures = {"jobs": float(len(replays)), "cost": _sum(r.cost for r in replays)}
    for least in (1, 2):
        covered = [r for r in replays if r.sizes >= least]
        out[f"covered{least}_pct"] = _pct(len(covered), len(replays))
        out[f"covered{least}_cost_pct"] = _pct(_sum(r.cost for r in covered), out["cost"] or 0.0)
        out |= _savings(f"s{least}_", [r for r in covered if r.completed])
    # Runs of one name at larger sizes that took longer did other work: a fit with slope >= 0 says
    # fewer CPUs are faster, which no strong scaling does. s2neg: the fits left; s1neg: the jobs
    # with evidence but such a fit (their users would keep their own choice).
    scored = [r for r in replays if r.completed and r.sizes >= 1]
    out |= _savings("s2neg_", [r for r in scored if r.slope is not None and r.slope < 0])
    out |= _savings("s1neg_", [r for r in scored if r.slope is None or r.slope < 0])
    own = [(r.own, r.cost) for r in replays if r.own is not None]
    out |= _check("check_own_", own)
    out |= _check(
        "check_same_", [(r.cheapest, r.cost) for r in replays if r.cheapest and r.cheapest.size == r.size]
    )
    return out


def _savings(prefix: str, scored: Sequence[Replay]) -> Figures:
    """What the cheapest (``cheapest_``) and the cheapest within the deadline (``deadline_``) would
    save on ``scored`` against their own runs: quoted, and replayed where the fit spans their size."""
    actual = _sum(r.cost for r in scored)
    slopes = [r.slope for r in scored if r.slope is not None]
    out: Figures = {
        f"{prefix}jobs": float(len(scored)),
        f"{prefix}cost": actual,
        f"{prefix}slope_median": _median(slopes),
        f"{prefix}slope_nonneg_pct": _pct(sum(b >= 0 for b in slopes), len(slopes)),
    }
    for label in ("cheapest", "deadline"):
        picks = [(r, r.cheapest if label == "cheapest" else r.in_deadline) for r in scored]
        answered = [(r, p) for r, p in picks if p is not None]
        quoted = _sum(r.cost if p is None else p.quoted for r, p in picks)
        moved = [(r.cost, p.replayed) for r, p in answered if p.replayed is not None]
        done = [(c, m) for c, m in moved if math.isfinite(m)]
        at = f"{prefix}{label}_"
        out |= {
            f"{at}answered_pct": _pct(len(answered), len(scored)),
            f"{at}changed_pct": _pct(sum(p.size != r.size for r, p in answered), len(scored)),
            f"{at}smaller_pct": _pct(sum(p.size < r.size for r, p in answered), len(scored)),
            f"{at}quoted_saving_pct": _cut(actual, quoted),
            f"{at}replayed_jobs": float(len(moved)),
            f"{at}replayed_unfinished_pct": _pct(len(moved) - len(done), len(moved)),
            f"{at}replayed_cost": _sum(c for c, _ in done),
            f"{at}replayed_saving_pct": _cut(_sum(c for c, _ in done), _sum(m for _, m in done)),
            f"{at}replayed_median_saving": _median([c - m for c, m in done]),
            f"{at}changed_median_stretch": _median(
                [
                    p.minutes / r.minutes
                    for r, p in answered
                    if p.size != r.size and p.minutes is not None and r.minutes > 0
                ]
            ),
        }
    return out


def _check(prefix: str, picks: Sequence[tuple[Pick | None, float]]) -> Figures:
    """Options at their jobs' own sizes: the fit's quoted cost against the job's real run under
    the option's limit (``realized``, reruns included) and under its own (``actual``)."""
    known = [(p.quoted, p.replayed, c) for p, c in picks if p is not None and p.replayed is not None]
    done = [(q, r, c) for q, r, c in known if math.isfinite(r)]
    return {
        f"{prefix}jobs": float(len(known)),
        f"{prefix}unfinished_pct": _pct(len(known) - len(done), len(known)),
        f"{prefix}quoted": _sum(q for q, _, _ in done),
        f"{prefix}realized": _sum(r for _, r, _ in done),
        f"{prefix}actual": _sum(c for _, _, c in done),
        f"{prefix}rerun_pct": _pct(sum(r > c * (1 + 1e-9) for _, r, c in done), len(done)),
        f"{prefix}median_ratio": _median([q / r for q, r, _ in done if r > 0]),
    }


def _sum(values: Iterable[float]) -> float:
    return float(math.fsum(values))


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole else None


def _cut(before: float, after: float) -> float | None:
    """core.accuracy.cut_pct, None (these figures' "none") where it is NaN: nothing to cut."""
    cut = cut_pct(before, after)
    return None if math.isnan(cut) else cut


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None
