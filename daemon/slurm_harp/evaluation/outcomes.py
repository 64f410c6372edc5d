"""How harp's predictions did on the jobs that ran, from the harvested jobs alone.

Each job harp saw carries its tag (core.tag): per target the value harp wrote (its prediction,
or the limit it set) and, where harp lowered a limit, what the user asked for. Beside what the job
used (core.job), that gives per target, partition and model version (never per user or per job):
the distribution of used / harp's value, how often the job used more than harp's value
(under-prediction), the jobs harp killed (core.extension.stopped_at_harps_limit: timed out before
their user's own limit, at a limit harp lowered or that Slurm cut toward the time_min harp set; out
of memory under a memory limit harp lowered), and the core-seconds harp took off
reservations of jobs that then finished within harp's limit. `harp serve` exports them
(server/outcome_metrics.py); being read from the job store, a restart loses nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from slurm_harp.core.extension import stopped_at_harps_limit
from slurm_harp.core.job import JobRecord
from slurm_harp.core.job_copies import first_copies, say_copies
from slurm_harp.core.request import Target
from slurm_harp.core.tag import parse_tag

# used / harp's value: below 1 the job used less than harp said; above 1 it needed more.
RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 5.0)
TARGET_OF_KEY = {"t": Target.TIME, "m": Target.MEMORY, "c": Target.CPUS}

Key = tuple[str, str, str]  # (target, partition, model version)
# (target, partition, the tag's versions): a Key once the versions' owners are known (resolve).
TagKey = tuple[str, str, tuple[str, ...]]


@dataclass
class Outcome:
    """Figures of one (target, partition, model version) over the jobs counted."""

    jobs: int = 0
    bucket_counts: list[int] = field(default_factory=lambda: [0] * len(RATIO_BUCKETS))  # not cumulative
    ratio_sum: float = 0.0
    underpredicted: int = 0
    killed: int = 0
    saved_core_seconds: float = 0.0

    def add(self, ratio: float) -> None:
        self.jobs += 1
        self.ratio_sum += ratio
        at = bisect.bisect_left(RATIO_BUCKETS, ratio)
        if at < len(RATIO_BUCKETS):
            self.bucket_counts[at] += 1

    def merge(self, other: Outcome) -> None:
        """Count ``other``'s jobs too."""
        self.jobs += other.jobs
        self.bucket_counts = [a + b for a, b in zip(self.bucket_counts, other.bucket_counts, strict=True)]
        self.ratio_sum += other.ratio_sum
        self.underpredicted += other.underpredicted
        self.killed += other.killed
        self.saved_core_seconds += other.saved_core_seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count) pairs as Prometheus histograms give them, +Inf last."""
        out, total = [], 0
        for bound, count in zip(RATIO_BUCKETS, self.bucket_counts, strict=True):
            total += count
            out.append((f"{bound:g}", total))
        return [*out, ("+Inf", self.jobs)]

    @property
    def underpredicted_ratio(self) -> float:
        return self.underpredicted / self.jobs if self.jobs else 0.0


def version_for(target: Target, versions: tuple[str, ...], owner: Callable[[str], Target | None]) -> str:
    """The version among a tag's ``versions`` that served ``target`` (``owner`` tells whose a version
    is, e.g. from the model store); "unknown" when none is known to."""
    mine = [v for v in versions if owner(v) is target]
    if len(mine) == 1:
        return mine[0]
    return "unknown"


def outcomes(records: Iterable[JobRecord], owner: Callable[[str], Target | None]) -> dict[Key, Outcome]:
    """The figures per (target, partition, version) over ``records`` (tagged or not: untagged and
    unreadable tags are skipped), each job once (outcomes_by_tag), the copies left out said in one
    warning."""
    by_tag, again = outcomes_by_tag(records)
    say_copies(again, "counted")
    return resolve([by_tag], owner)


def resolve(
    parts: Iterable[dict[TagKey, Outcome]], owner: Callable[[str], Target | None]
) -> dict[Key, Outcome]:
    """``parts``' figures merged per (target, partition, version), each tag's versions resolved by
    ``owner`` now (it changes as the model store does)."""
    out: dict[Key, Outcome] = {}
    for part in parts:
        for (target, partition, versions), outcome in part.items():
            key = (target, partition, version_for(Target(target), versions, owner))
            out.setdefault(key, Outcome()).merge(outcome)
    return out


def outcomes_by_tag(records: Iterable[JobRecord]) -> tuple[dict[TagKey, Outcome], int]:
    """The figures per (target, partition, the tag's versions) over ``records``: what does not
    depend on which model version served which target; and how many records were left out as
    copies of a job counted (core.job_copies: a job held under two sources of the job store is
    one job, its kills and savings counted once, as training counts it)."""
    records = list(records)
    kept, again = first_copies(records)
    out: dict[TagKey, Outcome] = {}
    for record in (records[i] for i in kept):
        tag = parse_tag(record.harp_tag)
        if tag is None:
            continue
        for key, value in tag.values.items():
            target = TARGET_OF_KEY[key]
            used = record.used(target)
            if used is None or value <= 0:
                continue
            outcome = out.setdefault((target.value, record.request.partition or "", tag.versions), Outcome())
            outcome.add(used / value)
            lowered = tag.flags.get(key) == "!"
            own = tag.own.get(key)
            killed = stopped_at_harps_limit(record, tag, target)
            if killed or used > value:
                outcome.underpredicted += 1
            outcome.killed += killed
            if target is Target.TIME and lowered and own is not None and not killed and used <= value:
                outcome.saved_core_seconds += (own - value) * 60.0 * record.cores
    return out, again
