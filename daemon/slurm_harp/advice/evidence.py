"""The evidence advice rests on: a user's completed runs of one job name, by size.

The runs are the caller's own (the server reads only that user's jobs; runs of anyone else are
dropped here too) of the same job name, and of the same script where some runs share its
signature. Runs that did not complete (failed, cancelled, killed at a limit) are counted by state,
not used: their run time says nothing about a full run.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

__all__ = ["Evidence", "Run", "evidence_of", "request_size", "run_size"]

LISTED_SIZES = 8  # sizes named in the evidence's label; runs at more are counted


@dataclass(frozen=True, slots=True)
class Run:
    """One completed run the advice rests on."""

    size: int  # CPUs, or GPUs for a GPU job
    minutes: float
    nodes: int = 1
    peak_mb: float | None = None  # peak resident memory per node
    requested_mb: float | None = None  # the memory per node it asked for (None: not said)


@dataclass(frozen=True)  # not slots: its size counts and label are computed once (cached_property)
class Evidence:
    runs: tuple[Run, ...] = ()
    unused: Mapping[str, int] = field(default_factory=dict)  # state -> runs not used
    unit: str = "CPU"  # or "GPU"
    by_script: bool = False  # matched by the script's signature, not only the name
    # Whether any of the runs of the name records a signature: runs harvested from sacct have none
    # (it records no script), so not matching one says nothing about the script
    signed: bool = False

    def sizes(self) -> list[tuple[int, int]]:
        """(size, runs) by size."""
        return list(self._sizes)

    def describe(self) -> str:
        """``2 runs at 1 CPU, 3 at 4 CPUs``; ``no evidence`` without runs. Past LISTED_SIZES sizes,
        the rest are counted (every option carries this label)."""
        return self._label

    @cached_property
    def _sizes(self) -> tuple[tuple[int, int], ...]:
        return tuple(sorted(Counter(r.size for r in self.runs).items()))

    @cached_property
    def _label(self) -> str:
        if not self.runs:
            return "no evidence"
        sizes = self._sizes
        parts = [f"{count} at {amount(size, self.unit)}" for size, count in sizes[:LISTED_SIZES]]
        first, at = sizes[0][1], sizes[0][0]
        parts[0] = f"{first} run{'s' if first != 1 else ''} at {amount(at, self.unit)}"
        if len(sizes) > LISTED_SIZES:
            rest = sizes[LISTED_SIZES:]
            parts.append(f"{sum(n for _, n in rest)} at {len(rest)} other sizes")
        return ", ".join(parts)


def amount(value: int, unit: str) -> str:
    """``1 CPU``, ``4 GPUs``."""
    return f"{value} {unit}{'s' if value != 1 else ''}"


def run_size(record: JobRecord, gpu: bool) -> int:
    """The size ``record`` ran at: its GPUs for a GPU job, else its CPUs."""
    request = record.request
    if gpu:
        return (request.gpus_per_node or 0) * max(request.min_nodes or 1, 1)
    return int(record.cores)


def request_size(job: JobRequest, gpu: bool) -> int | None:
    """The size ``job`` asks for: its GPUs for a GPU job, else its CPUs (None: not said)."""
    if gpu:
        return (job.gpus_per_node or 0) * max(job.min_nodes or 1, 1) or None
    return job.min_cpus


def evidence_of(job: JobRequest, records: Iterable[JobRecord], gpu: bool) -> Evidence:
    """The completed runs of ``job``'s user and name (and script, where runs share its signature)
    as evidence; the others counted by state. No user or no name: no evidence."""
    if job.user_name is None or job.job_name is None:
        return Evidence(unit="GPU" if gpu else "CPU")
    mine = [
        r
        for r in records
        if r.request.user_name == job.user_name
        and r.request.job_name == job.job_name
        and (job.user_id is None or r.request.user_id in (None, job.user_id))
    ]
    signature = job.script_signature
    by_script = signature is not None and any(r.request.script_signature == signature for r in mine)
    if by_script:
        mine = [r for r in mine if r.request.script_signature == signature]
    used, unused = [], Counter[str]()
    for r in mine:
        size = run_size(r, gpu)
        if r.state != "COMPLETED" or r.elapsed_s <= 0:
            unused[r.state if r.state != "COMPLETED" else "no run time"] += 1
        elif size < 1:
            unused["without GPUs"] += 1
        else:
            nodes = max(r.request.min_nodes or 1, 1)
            asked = _requested_mb(r.request, int(r.cores), nodes)
            used.append(Run(size, r.elapsed_s / 60.0, nodes, peak_mb=r.max_rss_mb, requested_mb=asked))
    signed = any(r.request.script_signature is not None for r in mine)
    return Evidence(tuple(used), dict(unused), "GPU" if gpu else "CPU", by_script, signed)


def _requested_mb(request: JobRequest, cpus: int, nodes: int) -> float | None:
    """The memory per node a run of ``cpus`` CPUs on ``nodes`` asked for (None: not said)."""
    if request.mem_per_node_mb is not None:
        return float(request.mem_per_node_mb)
    if request.mem_per_cpu_mb is not None:
        return float(request.mem_per_cpu_mb * math.ceil(cpus / nodes))
    return None
