"""What each mode would have done on a site's own jobs: the figures of `harp report`.

A site reads them before it switches rewriting on. Every job harp saw carries its tag
(core.tag): in shadow mode the value harp would have applied, in the other modes what it did,
with the user's own limit beside a lowered one. With what the job then used, that gives for every
mode at once the time limits it would have set (the policy's floor and min_gain applied, as the
daemon applies them), and from those evaluation.costs's figures, so that they read like
`harp evaluate`'s: core-hours reserved (limit x the CPUs asked for), the waste left (reserved but
unused by the jobs that finish), the jobs a rewrite kills before their own limit and what the kills
lose (as training's net cut counts it: core.accuracy.kill_loss), the jobs the guard extends. The jobs
harp did kill count in the row of the mode they ran in (time_min and extend kill none by design: the
report is where a site checks that), and in rewrite's.
Harp's real kills (jobs that timed out before their own limit at a limit harp lowered or that Slurm
cut toward the time_min harp set) are evaluation.outcomes's, the figures Prometheus shows.

A shadow value marked ``/k`` is one a changing mode would not have applied (the calibrated rule
keeps the request, or the user is cold): it keeps the request here too. Tags written before that
mark existed cannot say so; their values are taken as limits, which overstates the cut and the kills.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from slurm_harp.core.accuracy import kill_loss
from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.request import Target
from slurm_harp.core.tag import as_submitted, parse_tag
from slurm_harp.evaluation.costs import effective_limits, extended, waste
from slurm_harp.evaluation.observed import Observed, observe
from slurm_harp.evaluation.outcomes import outcomes
from slurm_harp.evaluation.site_targets import (
    TargetRow,
    memory_ratios,
    mode_limits,
    other_targets,
    rewrite_kills,
)

# The modes compared, least change first; off and shadow leave every job as asked.
MODES: tuple[Mode, ...] = (Mode.SHADOW, Mode.TIME_MIN, Mode.EXTEND, Mode.REWRITE)


@dataclass(frozen=True)
class ModeRow:
    """One mode's time limits over the jobs with a time prediction."""

    mode: Mode
    changed: int  # jobs whose limit (time_min: time_min) the mode sets below the request
    # Σ limit x the CPUs each user asked for (core.tag.own_cores); extend: the limit the
    # guard's extensions end at, as the waste is counted (the cut one was less than used + waste)
    reserved_core_h: float
    # reserved but unused by the jobs that finish (after any extension; not those harp did kill)
    waste_core_h: float
    # Jobs killed before their own limit: rewrite, would be plus every job a limit of harp's did stop
    # (a rewrite to it stops it again); time_min and extend, none would be (the guard extends), but
    # the jobs harp did kill while running in that mode (the guard down or late) are counted.
    killed: int
    lost_core_h: float  # what the kills lose (lost_to_kills); the net saving is the waste cut less it
    extended: int | None  # jobs the guard extends at least once; None: depends on the schedule


@dataclass(frozen=True)
class PartitionRow:
    partition: str
    jobs: int
    used_core_h: float  # run x the CPUs the job held
    reserved_core_h: float  # as asked, the CPUs too
    waste_core_h: dict[Mode, float]  # shadow (as asked), extend, rewrite
    rewrite_killed: int  # jobs a rewrite would kill before their own limit (ModeRow.killed's rewrite)
    harp_killed: int  # jobs harp did kill: timed out before their own limit (outcomes)


@dataclass(frozen=True)
class TimePoints:
    """Per job with a time prediction, in minutes: what the plots draw."""

    actual: np.ndarray
    predicted: np.ndarray  # harp's value: its prediction, or the limit it set
    requested: np.ndarray
    stopped: np.ndarray  # stopped at a limit: the run time is a lower bound


@dataclass(frozen=True)
class SiteReport:
    since: int
    partitions: tuple[str, ...]  # the filter asked for; empty: every partition
    policy: Policy
    jobs: int  # ended in the window
    untagged: int  # no harp tag: harp did not see the job (off, daemon down, opted out)
    unreadable: int  # a harp tag that does not parse
    tagged: int
    timed: int  # tagged, with a time prediction and a usable run (in the time figures)
    first_end: int | None
    last_end: int | None
    tag_modes: dict[str, int]
    versions: dict[str, int]
    modes: list[ModeRow]
    by_partition: list[PartitionRow]
    other_targets: list[TargetRow]
    points: TimePoints
    memory_ratios: np.ndarray  # used / harp's value, per job with a memory prediction


def site_report(
    records: Iterable[JobRecord], policy: Policy, since: int, partitions: tuple[str, ...] = ()
) -> SiteReport:
    """The figures over ``records`` (the jobs that ended since ``since``, already filtered)."""
    seen, jobs, tags, ends, untagged, unreadable = [], [], [], [], 0, 0
    for record in records:
        if record.end_time is not None:
            ends.append(record.end_time)
        tag = parse_tag(record.harp_tag)
        if tag is None:
            untagged += record.harp_tag is None
            unreadable += record.harp_tag is not None
            continue
        seen.append(record)
        jobs.append(as_submitted(record))
        tags.append(tag)
    timed = np.array(["t" in t.values for t in tags], dtype=bool)
    obs = observe(jobs, Target.TIME, tags)  # cores: those each user asked for (core.tag.own_cores)
    held = np.array([j.cores for j in jobs])  # a job whose CPUs harp cut held fewer
    keep = obs.usable() & timed
    time_obs = obs.take(keep)
    limits = {m: mode_limits(jobs, tags, "t", m, policy)[keep] for m in MODES}
    ran_in = np.array([t.mode for t in tags], dtype=object)[keep]
    harp_kills = _harp_kills(seen)
    parts = np.array([j.request.partition or "" for j in jobs], dtype=object)[keep]
    return SiteReport(
        since=since,
        partitions=partitions,
        policy=policy,
        jobs=len(seen) + untagged + unreadable,
        untagged=untagged,
        unreadable=unreadable,
        tagged=len(seen),
        timed=len(time_obs),
        first_end=min(ends, default=None),
        last_end=max(ends, default=None),
        tag_modes=dict(Counter(t.mode for t in tags).most_common()),
        versions=dict(Counter(v for t in tags for v in t.versions).most_common()),
        modes=mode_rows(time_obs, limits, ran_in),
        by_partition=_partition_rows(time_obs, limits, parts, harp_kills, held[keep]),
        other_targets=other_targets(jobs, tags, policy),
        points=TimePoints(
            actual=time_obs.actual,
            predicted=np.array([t.values["t"] for t, k in zip(tags, keep, strict=True) if k], dtype=float),
            requested=time_obs.requested,
            stopped=time_obs.censored,
        ),
        memory_ratios=memory_ratios(jobs, tags),
    )


def core_hours(obs: Observed, limits: np.ndarray) -> float:
    """Σ limit x cores, in core-hours (time limits in minutes)."""
    return float(np.sum(limits * obs.cores)) / 60.0


def mode_rows(
    obs: Observed, limits: dict[Mode, np.ndarray], ran_in: np.ndarray | None = None
) -> list[ModeRow]:
    """One row per mode over ``obs`` (time, usable jobs), ``limits`` per mode aligned with it;
    ``ran_in``: the mode each job's tag was written in (None: unknown). A job a limit of harp's did
    stop (obs.stopped_by_harp) is killed in the rewrite row, and in the row of the mode it ran in:
    time_min and extend kill none by design, and their rows are where a site checks that."""
    asked = obs.requested
    none, stopped = np.zeros(len(obs), dtype=bool), obs.stopped_by_harp

    def row(
        mode: Mode, cut: np.ndarray, final: np.ndarray, new: np.ndarray, extended_jobs: int | None
    ) -> ModeRow:
        """``cut``: the limits the mode sets; ``final``: those reserved in the end; ``new``: the jobs
        it newly kills; ``extended_jobs``: how many the guard extends."""
        if mode is Mode.REWRITE:
            did = stopped  # a rewrite to the limit that stopped a job stops it again
        else:
            did = none if ran_in is None else stopped & (ran_in == mode.value)
        killed, lost = int(np.sum(new | did)), lost_to_kills(obs, cut, new, did)
        changed = int(np.sum(cut < asked))
        # A job harp did kill does not finish in this row: its waste is in what its kill loses.
        left = waste(obs.take(~did), final[~did])
        return ModeRow(mode, changed, core_hours(obs, final), left, killed, lost, extended_jobs)

    rows = [row(Mode.SHADOW, asked, asked, none, 0)]
    # time_min keeps the limit: only the jobs a backfill starts early run with a cut one, so what it
    # saves is in the schedule (`harp simulate`), not in the reservations.
    rows.append(row(Mode.TIME_MIN, effective_limits(obs, limits[Mode.TIME_MIN]), asked, none, None))
    cut = effective_limits(obs, limits[Mode.EXTEND])
    finals, counts = extended(obs, cut)
    rows.append(row(Mode.EXTEND, cut, finals, none, int(np.sum(counts > 0))))
    cut = effective_limits(obs, limits[Mode.REWRITE])
    rows.append(row(Mode.REWRITE, cut, cut, rewrite_kills(obs, cut)[0], 0))
    return rows


def lost_to_kills(obs: Observed, cut: np.ndarray, new: np.ndarray, stopped: np.ndarray) -> float:
    """Core-hours the kills of limits ``cut`` lose: of each job they newly kill (``new``), the
    attempt cut short and the unused reservation of its re-run under its own limit, as training's net
    cut counts them (core.accuracy.kill_loss; waste() counts a killed job's waste as gone); of each
    job a limit of harp's did stop (``stopped``), likewise the run it lost and its re-run's unused
    reservation, the run it reached standing in for its true run time as in the waste the rows as
    asked count for it (both are lower bounds of the same unknown): kill_loss at that run, its
    request in all. So a kill of
    harp's costs the net saving the run it lost. It was charged the run alone while its waste as
    asked stayed in the cut: a job harp killed short of half its request showed as a saving."""
    killed_at = np.where(stopped, obs.actual, cut)  # harp's kill: at the run it reached
    lost = obs.cores / 60.0 * kill_loss(killed_at, obs.actual, obs.requested)
    return float(np.sum(lost[new | stopped]))


def _harp_kills(records: list[JobRecord]) -> dict[str, int]:
    """Per partition, the jobs harp killed: outcomes' count, over every model version."""
    kills: Counter[str] = Counter()
    for (target, partition, _), outcome in outcomes(records, lambda _: None).items():
        if target == Target.TIME.value:
            kills[partition] += outcome.killed
    return dict(kills)


def _partition_rows(
    obs: Observed,
    limits: dict[Mode, np.ndarray],
    parts: np.ndarray,
    harp_kills: dict[str, int],
    held: np.ndarray,
) -> list[PartitionRow]:
    """One row per partition; ``held``: the CPUs each job of ``obs`` ran with (its used core-hours)."""
    rows = []
    for name in sorted(set(parts.tolist()) | {p for p, n in harp_kills.items() if n}):
        mine = parts == name
        sub = obs.take(mine)
        modes = {r.mode: r for r in mode_rows(sub, {m: v[mine] for m, v in limits.items()})}
        rows.append(
            PartitionRow(
                partition=name,
                jobs=len(sub),
                used_core_h=float(np.sum(sub.actual * held[mine])) / 60.0,
                reserved_core_h=modes[Mode.SHADOW].reserved_core_h,
                waste_core_h={m: modes[m].waste_core_h for m in (Mode.SHADOW, Mode.EXTEND, Mode.REWRITE)},
                rewrite_killed=modes[Mode.REWRITE].killed,
                harp_killed=harp_kills.get(name, 0),
            )
        )
    return rows
