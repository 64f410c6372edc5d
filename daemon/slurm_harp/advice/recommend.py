"""The advice: what each way of running a job would take and cost, from the user's own runs of it.

For a job as submitted (``Ask``) and the finished runs of the same user and job name (``runs``;
the caller reads only that user's jobs, and runs of anyone else are dropped here too), each
candidate configuration (a partition and a size: CPUs, or GPUs for a GPU job, on the fewest
nodes that hold them) gets a run-time distribution, a memory request and a first time limit,
and is priced with the site's tariff, HARP's re-executions included (quote.py). Then:

- the cheapest option whose longest expected run (the longest run the evidence has, with the
  attempts killed before it) ends within the deadline;
- the fastest option (expected minutes) whose expected cost is within the budget;
- the Pareto set: the options no other is both cheaper and faster than (or as cheap and faster,
  or as fast and cheaper).

Run time: ``log T = a + b log n`` fitted by least squares over the completed runs (T minutes, n
the size they ran at); a candidate's run times are the fitted value times each run's residual
factor, equally likely, so the spread of the user's own runs carries over. One size only: the
runs at that size as they are. Sizes outside the sizes run get no run time: "no evidence" (no
extrapolation). Runs that did not complete (failed, cancelled, killed at a limit) are counted,
not used: their run time says nothing about a full run.

Memory per node is taken to grow with the size per node, but no faster than in proportion: a
run bounds a candidate with no more per node than it had by its peak, one with more by its peak
scaled up in proportion; the least of these bounds, plus 20 %. No peak known: the job's own
memory request.

docs/advice.md explains the answer to users.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_harp.advice.gpu_memory import TrainingFacts, fewest_gpus, model_state_bytes
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.quote import Allocation, Configuration, Quote, price
from slurm_harp.advice.reexecution import charged_minutes
from slurm_harp.advice.tariff import Tariff
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

__all__ = ["Advice", "Ask", "Empirical", "Evidence", "Option", "Run", "Scaling", "advise", "evidence_of"]

LIMIT_MARGIN = 1.1  # a first limit is a run time of the evidence plus 10 %, in whole minutes
MEMORY_MARGIN = 1.2  # a memory request is the peak the evidence gives plus 20 %
NO_MAX_TIME = 366 * 1440  # the cap on attempts in a partition without MaxTime (minutes)
LARGEST_POWER = 10  # candidate sizes: powers of two up to 2**10, with the sizes run and requested
MOST_LIMITS = 16  # first limits tried per option: run times of the evidence, evenly spread, the longest too
GB = 1e9


@dataclass(frozen=True, slots=True)
class Ask:
    """What a user asks advice for."""

    job: JobRequest  # as submitted; ``user_name`` is the caller, set by the server
    partitions: tuple[str, ...] = ()  # the candidates' partitions; (): every partition known
    deadline_minutes: float | None = None
    budget: float | None = None  # in the tariff's currency
    training: TrainingFacts | None = None  # a DNN training: checks the model states fit a GPU


@dataclass(frozen=True, slots=True)
class Run:
    """One completed run the advice rests on."""

    size: int  # CPUs, or GPUs for a GPU job
    minutes: float
    nodes: int = 1
    peak_mb: float | None = None  # peak resident memory per node


@dataclass(frozen=True, slots=True)
class Evidence:
    runs: tuple[Run, ...] = ()
    unused: Mapping[str, int] = field(default_factory=dict)  # state -> runs not used
    unit: str = "CPU"  # or "GPU"
    by_script: bool = False  # matched by the script's signature, not only the name

    def sizes(self) -> list[tuple[int, int]]:
        """(size, runs) by size."""
        return sorted(Counter(r.size for r in self.runs).items())

    def describe(self) -> str:
        """``2 runs at 1 CPU, 3 at 4 CPUs``; ``no evidence`` without runs."""
        if not self.runs:
            return "no evidence"
        parts = [f"{count} at {_amount(size, self.unit)}" for size, count in self.sizes()]
        first = self.sizes()[0][1]
        parts[0] = f"{first} run{'s' if first != 1 else ''} at {_amount(self.sizes()[0][0], self.unit)}"
        return ", ".join(parts)


def _amount(value: int, unit: str) -> str:
    return f"{value} {unit}{'s' if value != 1 else ''}"


@dataclass(frozen=True, slots=True)
class Scaling:
    """``log minutes = intercept + slope log size``, with the runs' residuals, over [low, high]."""

    intercept: float
    slope: float
    residuals: tuple[float, ...]
    low: int
    high: int

    @classmethod
    def fit(cls, runs: Sequence[Run]) -> Scaling | None:
        if not runs:
            return None
        xs = [math.log(r.size) for r in runs]
        ys = [math.log(r.minutes) for r in runs]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0
        intercept = my - slope * mx
        residuals = tuple(y - (intercept + slope * x) for x, y in zip(xs, ys, strict=True))
        sizes = [r.size for r in runs]
        return cls(intercept, slope, residuals, min(sizes), max(sizes))

    def minutes(self, size: int) -> tuple[float, ...] | None:
        """The run times at ``size`` (equally likely), None outside the sizes run."""
        if not self.low <= size <= self.high:
            return None
        centre = self.intercept + self.slope * math.log(size)
        return tuple(math.exp(centre + r) for r in self.residuals)


@dataclass(frozen=True, slots=True)
class Option:
    partition: str
    size: int
    allocation: Allocation
    evidence: str  # what its run time rests on, or why there is none
    quote: Quote | None = None  # None: not priced (no evidence, or it does not fit)
    longest_minutes: float | None = None  # the longest run of the evidence, its killed attempts included
    note: str = ""

    @property
    def priced(self) -> bool:
        return self.quote is not None

    @property
    def limit_minutes(self) -> float | None:
        return None if self.quote is None else self.quote.configuration.limit_minutes

    @property
    def expected_minutes(self) -> float | None:
        return None if self.quote is None else self.quote.reexecution.expected_minutes

    @property
    def expected_cost(self) -> float | None:
        return None if self.quote is None else self.quote.expected_cost

    @property
    def mem_per_node_mb(self) -> float:
        return self.allocation.mem_mb / max(self.allocation.nodes, 1)


@dataclass(frozen=True, slots=True)
class Advice:
    user: str | None
    job_name: str | None
    currency: str
    evidence: Evidence
    options: tuple[Option, ...]
    cheapest: Option | None  # within the deadline (any, without one)
    fastest: Option | None  # within the budget (any, without one)
    pareto: tuple[Option, ...]
    notes: tuple[str, ...] = ()


def _run_size(record: JobRecord, gpu: bool) -> int:
    request = record.request
    if gpu:
        return (request.gpus_per_node or 0) * max(request.min_nodes or 1, 1)
    return int(record.cores)


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
        size = _run_size(r, gpu)
        if r.state != "COMPLETED" or r.elapsed_s <= 0:
            unused[r.state if r.state != "COMPLETED" else "no run time"] += 1
        elif size < 1:
            unused["without GPUs"] += 1
        else:
            nodes = max(r.request.min_nodes or 1, 1)
            used.append(Run(size=size, minutes=r.elapsed_s / 60.0, nodes=nodes, peak_mb=r.max_rss_mb))
    return Evidence(tuple(used), dict(unused), "GPU" if gpu else "CPU", by_script)


def _is_gpu_job(ask: Ask, records: Sequence[JobRecord]) -> bool:
    if ask.training is not None or (ask.job.gpus_per_node or 0) > 0:
        return True
    if ask.job.gpus_per_node == 0:
        return False
    same = [r for r in records if r.request.job_name == ask.job.job_name]
    return bool(same) and all((r.request.gpus_per_node or 0) > 0 for r in same)


def _request_size(job: JobRequest, gpu: bool) -> int | None:
    if gpu:
        return (job.gpus_per_node or 0) * max(job.min_nodes or 1, 1) or None
    return job.min_cpus


def _cpus_per_gpu(job: JobRequest, evidence: Evidence, records: Sequence[JobRecord]) -> int:
    size = _request_size(job, True)
    if size and job.min_cpus:
        return max(1, job.min_cpus // size)
    ratios = sorted(
        int(r.cores) // _run_size(r, True)
        for r in records
        if r.request.job_name == job.job_name and _run_size(r, True) > 0
    )
    return max(1, ratios[len(ratios) // 2]) if ratios else 1


def _sizes(most: int | None, evidence: Evidence, requested: int | None) -> list[int]:
    sizes = {2**i for i in range(LARGEST_POWER + 1)} if most else set()
    sizes |= {r.size for r in evidence.runs}
    if requested:
        sizes.add(requested)
    if most:
        sizes = {s for s in sizes if s <= most}
    elif evidence.runs:  # nothing known of the partition: powers of two between the sizes run
        low, high = min(r.size for r in evidence.runs), max(r.size for r in evidence.runs)
        sizes |= {2**i for i in range(LARGEST_POWER + 1) if low <= 2**i <= high}
    return sorted(sizes)


def _mem_per_node(evidence: Evidence, job: JobRequest, size: int, nodes: int, floor: float) -> float:
    """MiB per node a candidate should ask for (0: unknown, the partition's default applies).

    Memory per node is taken to grow with the job's size per node, but no faster than in
    proportion: then runs with at least the candidate's size per node bound it by their peak, and
    runs with less by their peak scaled up in proportion. Each size's runs (their largest peak)
    give a bound; the least of them, plus 20 %, at least ``floor``."""
    per_node = size / nodes
    bounds: dict[float, float] = {}
    for r in evidence.runs:
        if r.peak_mb is None or r.peak_mb <= 0:
            continue
        theirs = r.size / r.nodes
        bound = r.peak_mb * max(1.0, per_node / theirs)
        bounds[theirs] = max(bounds.get(theirs, 0.0), bound)
    if bounds:
        return float(max(math.ceil(min(bounds.values()) * MEMORY_MARGIN), math.ceil(floor)))
    if job.mem_per_node_mb is not None:
        return float(job.mem_per_node_mb)
    if job.mem_per_cpu_mb is not None:
        cpus = size if evidence.unit == "CPU" else (job.min_cpus or 1)
        return float(job.mem_per_cpu_mb * math.ceil(cpus / nodes))
    return 0.0


class Empirical:
    """Equally likely run times as a survival.Runtime (PointMasses' meaning, by bisection: a
    thousand runs cost no more than ten)."""

    def __init__(self, minutes: Sequence[float]) -> None:
        if not minutes or not all(math.isfinite(t) and t >= 0 for t in minutes):
            raise ValueError(f"run times must be finite and >= 0, at least one: {minutes}")
        self.values = sorted(minutes)
        self._sums = [0.0, *itertools.accumulate(self.values)]

    def survival(self, t: float) -> float:
        return (len(self.values) - bisect.bisect_right(self.values, t)) / len(self.values)

    def partial_mean(self, low: float, high: float) -> float:
        if high <= low:
            return 0.0
        lo, hi = bisect.bisect_right(self.values, low), bisect.bisect_right(self.values, high)
        return (self._sums[hi] - self._sums[lo]) / len(self.values)


def _limit_grid(runtime: Empirical, cap: float) -> list[float]:
    """At most MOST_LIMITS first limits: evenly spread run times (the longest always) plus 10 %,
    in whole minutes, at most the cap."""
    values = runtime.values
    step = max(1, math.ceil(len(values) / (MOST_LIMITS - 1)))
    picked = {*values[step - 1 :: step], values[-1]}
    return sorted({min(float(max(1, math.ceil(_same(LIMIT_MARGIN * t)))), cap) for t in picked})


def _best_quote(
    tariff: Tariff, partition: str, allocation: Allocation, minutes: Sequence[float], cap: float
) -> tuple[Quote, float]:
    """The first limit of least expected cost among run times of the evidence plus 10 % (in
    whole minutes, at most the cap), ties to the shorter limit; and the longest run's minutes
    with the attempts killed before it (inf when it cannot finish under the cap)."""
    runtime = Empirical(minutes)
    limits = _limit_grid(runtime, cap)
    best: tuple[tuple[float, float, float], Quote] | None = None
    for limit in limits:
        quote = price(tariff, Configuration(partition, allocation, limit), runtime, cap)
        key = (_same(quote.expected_cost), _same(quote.reexecution.expected_minutes), limit)
        if best is None or key < best[0]:
            best = (key, quote)
    assert best is not None
    chosen = best[1]
    return chosen, charged_minutes(chosen.configuration.limit_minutes, chosen.cap_minutes, max(minutes))


def _same(value: float) -> float:
    """``value`` to 9 significant digits: costs and times equal but for rounding compare equal
    (perfect scaling gives every size the same cost, reached by different float paths)."""
    return float(f"{value:.9g}")


def _cost_time(o: Option) -> tuple[float, float]:
    assert o.expected_cost is not None and o.expected_minutes is not None
    return _same(o.expected_cost), _same(o.expected_minutes)


def _pareto(options: Sequence[Option]) -> tuple[Option, ...]:
    """The options no other is at least as cheap and as fast as, and better in one."""
    points = [_cost_time(o) for o in options]

    def dominated(c: float, m: float) -> bool:
        return any(qc <= c and qm <= m and (qc < c or qm < m) for qc, qm in points)

    return tuple(o for o, (c, m) in zip(options, points, strict=True) if not dominated(c, m))


def advise(
    ask: Ask,
    records: Iterable[JobRecord],
    tariff: Tariff,
    shapes: Mapping[str, PartitionShape],
    gpu_memory_bytes: Mapping[str, float] | None = None,
    memory_floor_mb: float = 0.0,
) -> Advice:
    """The advice for ``ask`` from ``records`` (the caller's runs; anyone else's are ignored),
    under ``tariff``, in the partitions of ``shapes`` (their sizes; a partition named by the ask
    but unknown there gets the sizes run and asked for). ``gpu_memory_bytes``: partition -> one
    GPU's memory, for the training check. ``memory_floor_mb``: no memory request from the peaks
    below this (harp.toml's policy.floor.memory_mb: a sampled peak may miss a short spike)."""
    records = [
        r for r in records if ask.job.user_name is not None and r.request.user_name == ask.job.user_name
    ]
    gpu = _is_gpu_job(ask, records)
    evidence = evidence_of(ask.job, records, gpu)
    scaling = Scaling.fit(evidence.runs)
    requested = _request_size(ask.job, gpu)
    gpu_memory = gpu_memory_bytes or {}
    cpus_per_gpu = _cpus_per_gpu(ask.job, evidence, records) if gpu else 0
    notes = _notes(ask, evidence, gpu_memory)

    names = list(ask.partitions) or sorted(set(shapes) | set(tariff.partitions))
    own = ask.job.partition
    if not ask.partitions and own is not None:  # the job's own partition first
        names = [own, *(n for n in names if n != own)]
    if not names:
        notes.append("no partition is known (scontrol could not be read): name one to compare")
    options: list[Option] = []
    for name in names:
        shape = shapes.get(name)
        if shape is None:
            notes.append(f"partition {name}: its size is unknown; only the sizes run or asked for are shown")
        most = None if shape is None else (shape.most_gpus if gpu else shape.most_cpus)
        if shape is not None and most == 0:
            notes.append(f"partition {name}: has no {'GPUs' if gpu else 'CPUs'} for this job")
            continue
        for size in _sizes(most, evidence, requested):
            options.append(
                _option(ask, name, shape, size, gpu, cpus_per_gpu, evidence, scaling, tariff, gpu_memory,
                        memory_floor_mb)
            )  # fmt: skip

    order = {id(o): i for i, o in enumerate(options)}
    finishing = [o for o in options if o.quote is not None and o.quote.p_unfinished == 0.0]
    in_time = [
        o
        for o in finishing
        if ask.deadline_minutes is None
        or (o.longest_minutes is not None and o.longest_minutes <= ask.deadline_minutes)
    ]
    affordable = [
        o
        for o in finishing
        if ask.budget is None or (o.expected_cost is not None and o.expected_cost <= ask.budget)
    ]

    def by_cost(o: Option) -> tuple[float, float, int, int]:
        return (*_cost_time(o), o.size, order[id(o)])

    def by_time(o: Option) -> tuple[float, float, int, int]:
        cost, minutes = _cost_time(o)
        return (minutes, cost, o.size, order[id(o)])

    if finishing and not in_time:
        notes.append(f"no option is sure to end within the deadline of {ask.deadline_minutes:g} min")
    if finishing and not affordable:
        notes.append(f"no option is expected to cost at most the budget of {ask.budget:g} {tariff.currency}")
    return Advice(
        user=ask.job.user_name,
        job_name=ask.job.job_name,
        currency=tariff.currency,
        evidence=evidence,
        options=tuple(options),
        cheapest=min(in_time, key=by_cost) if in_time else None,
        fastest=min(affordable, key=by_time) if affordable else None,
        pareto=tuple(sorted(_pareto(finishing), key=by_cost)),
        notes=tuple(notes),
    )


def _option(
    ask: Ask,
    name: str,
    shape: PartitionShape | None,
    size: int,
    gpu: bool,
    cpus_per_gpu: int,
    evidence: Evidence,
    scaling: Scaling | None,
    tariff: Tariff,
    gpu_memory: Mapping[str, float],
    memory_floor_mb: float,
) -> Option:
    job = ask.job
    cpus = size * cpus_per_gpu if gpu else size
    if shape is None:
        nodes: int | None = max(job.min_nodes or 1, 1) if size == _request_size(job, gpu) else 1
    else:
        nodes = shape.nodes_for_gpus(size) if gpu else shape.nodes_for_cpus(size)
    if nodes is None:  # cannot be reached from _sizes, which stays within the partition
        return Option(name, size, Allocation(cpus=cpus), "", note="does not fit the partition")
    mem_node = _mem_per_node(evidence, job, size, nodes, memory_floor_mb)
    allocation = Allocation(cpus=cpus, mem_mb=mem_node * nodes, nodes=nodes, gpus=size if gpu else 0)
    minutes = scaling.minutes(size) if scaling is not None else None
    label = _label(evidence, size)
    if shape is not None and gpu and cpus > shape.cpus_per_node * nodes:
        return Option(name, size, allocation, label, note=f"{cpus} CPUs do not fit on {nodes} node(s)")
    room = None if shape is None else shape.mem_per_node_mb
    if room is not None and mem_node > room:
        return Option(
            name, size, allocation, label, note=f"needs {mem_node:.0f} MB per node; a node has {room:.0f} MB"
        )
    if ask.training is not None:
        need = model_state_bytes(ask.training, size)
        has = gpu_memory.get(name)
        if has is not None and need > has:
            return Option(
                name, size, allocation, label,
                note=f"model states need {need / GB:.1f} GB per GPU; a GPU here has {has / GB:.1f} GB",
            )  # fmt: skip
    if minutes is None:
        return Option(name, size, allocation, "no evidence")
    bounds = [b for b in (shape and shape.max_minutes, tariff.partition(name).max_minutes) if b]
    cap = float(min(bounds, default=NO_MAX_TIME))
    quote, longest = _best_quote(tariff, name, allocation, minutes, cap)
    note = "" if quote.p_unfinished == 0 else "runs past the partition's MaxTime: cannot finish"
    return Option(name, size, allocation, label, quote=quote, longest_minutes=longest, note=note)


def _label(evidence: Evidence, size: int) -> str:
    sizes = dict(evidence.sizes())
    if not sizes or not min(sizes) <= size <= max(sizes):
        return "no evidence"
    if len(sizes) == 1:
        return evidence.describe()
    return f"fit of {evidence.describe()}"


def _notes(ask: Ask, evidence: Evidence, gpu_memory: Mapping[str, float]) -> list[str]:
    notes = []
    job = ask.job
    if job.job_name is None:
        notes.append("the job has no name: HARP finds its history by its name (sbatch -J)")
    elif not evidence.runs:
        notes.append(f"no completed run of {job.job_name!r} by {job.user_name}: no evidence for any option")
    if evidence.unused:
        what = ", ".join(f"{n} {state}" for state, n in sorted(evidence.unused.items()))
        notes.append(f"runs not used (they did not complete): {what}")
    if evidence.runs and job.script_signature is not None:
        notes.append(
            "runs matched by script signature and name"
            if evidence.by_script
            else "runs matched by name (none has this script's signature)"
        )
    if ask.training is not None:
        fit = fewest_gpus(ask.training, gpu_memory) if gpu_memory else None
        if not gpu_memory:
            notes.append(
                "the GPUs' memory is not configured ([[advice.partition]]): the model states are not checked"
            )
        elif fit is None:
            notes.append("the model states fit no GPU here at any degree up to 1024")
        else:
            notes.append(
                f"the fewest GPUs that hold the model states: {fit.gpus} in {fit.partition} "
                f"({fit.need_bytes / GB:.1f} GB of {fit.memory_bytes / GB:.1f} GB per GPU)"
            )
    return notes
