"""The simulator's input: a job trace as flat arrays, ordered by submit time.

Plain Python lists rather than numpy arrays: the event loop reads one job's fields at a time, and
list indexing is several times faster than numpy scalar access.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Workload:
    """Jobs to replay on a machine of ``processors`` processors.

    Per job ``i``: ``submit`` (s), ``run`` (s, its real run time, ended on its own or killed),
    ``request`` (s, the user's time limit, enforced), ``procs`` and ``user`` (an integer code); the
    times finite (ValueError naming the job).
    ``no_request``: the jobs whose user asked for no limit (their ``request`` is a stand-in, the
    trace's longest: trace.py); the daemon leaves their limit alone (``as_set``).
    """

    processors: int
    ids: Sequence[str]
    submit: Sequence[float]
    run: Sequence[float]
    request: Sequence[float]
    procs: Sequence[int]
    user: Sequence[int]
    name: str = "jobs"
    dropped: dict[str, int] = field(default_factory=dict)
    no_request: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        n = len(self.ids)
        sizes = {len(s) for s in (self.submit, self.run, self.request, self.procs, self.user)}
        if sizes != {n}:
            raise ValueError(f"workload arrays differ in length: {sorted(sizes | {n})}")
        if self.processors < 1:
            raise ValueError(f"processors must be >= 1, not {self.processors}")
        for i in range(n):
            if not 1 <= self.procs[i] <= self.processors:
                raise ValueError(f"job {self.ids[i]}: {self.procs[i]} processors on a {self.processors}")
            # Finite: a NaN submit time passed the order check (NaN compares false) and the event
            # loop never ended; an infinite request overflowed the Slurm scheduler's math.ceil.
            if not (0 < self.request[i] < math.inf and 0 <= self.run[i] < math.inf):
                said = f"request {self.request[i]}, run {self.run[i]}"
                raise ValueError(f"job {self.ids[i]}: {said}: expected a finite request > 0 and run >= 0")
            if not math.isfinite(self.submit[i]):
                raise ValueError(f"job {self.ids[i]}: submit time {self.submit[i]}, not a finite number")
            if i and self.submit[i] < self.submit[i - 1]:
                raise ValueError("workload not ordered by submit time")
        if any(not 0 <= i < n for i in self.no_request):
            raise ValueError("no_request names a job the workload does not have")

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def build(
        cls,
        processors: int,
        jobs: Sequence[tuple[str, float, float, float, int, int]],
        name: str = "jobs",
        no_request: Collection[int] = (),
    ) -> Workload:
        """From rows (id, submit, run, request, procs, user); rows are sorted by submit time here.
        ``no_request``: the rows (by their place in ``jobs``) whose user asked for no limit.

        Jobs wider than the machine are dropped (counted in ``dropped``), as they could never run.
        """
        unasked = set(no_request)
        order = sorted(range(len(jobs)), key=lambda k: jobs[k][1])
        order = [k for k in order if 1 <= jobs[k][4] <= processors]
        kept = [jobs[k] for k in order]
        dropped = {"wider than the machine": len(jobs) - len(kept)} if len(kept) < len(jobs) else {}
        return cls(
            processors=processors,
            ids=[str(r[0]) for r in kept],
            submit=[float(r[1]) for r in kept],
            run=[float(r[2]) for r in kept],
            request=[float(r[3]) for r in kept],
            procs=[int(r[4]) for r in kept],
            user=[int(r[5]) for r in kept],
            name=name,
            dropped=dropped,
            no_request=frozenset(i for i, k in enumerate(order) if k in unasked),
        )

    def head(self, count: int) -> Workload:
        """The first ``count`` jobs (by submit time)."""
        return Workload(
            self.processors,
            self.ids[:count],
            self.submit[:count],
            self.run[:count],
            self.request[:count],
            self.procs[:count],
            self.user[:count],
            self.name,
            dict(self.dropped),
            frozenset(i for i in self.no_request if i < count),
        )


def predictions_by_id(workload: Workload, by_id: dict[str, float]) -> list[float]:
    """A per-job planned-limit array (seconds, NaN where none) from a job id -> seconds map."""
    return [float(by_id.get(job_id, math.nan)) for job_id in workload.ids]


def predictions_by_job(workload: Workload, by_job: dict[tuple[str, float], float]) -> list[float]:
    """Like predictions_by_id, from a (job id, submit time) -> seconds map: a job store may hold
    several jobs of one id (ids given again, a requeued job's runs)."""
    return [float(by_job.get(job, math.nan)) for job in zip(workload.ids, workload.submit, strict=True)]
