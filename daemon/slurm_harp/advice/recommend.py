"""The advice: what each way of running a job would take and cost, from the user's own runs of it.

For a job as submitted (``Ask``) and the finished runs of the same user and job name (``runs``;
the caller reads only that user's jobs, and runs of anyone else are dropped here too), each
candidate configuration (a partition and a size: CPUs, or GPUs for a GPU job, on the fewest
nodes that hold them) gets a run-time distribution, a memory request and a first time limit,
and is priced with the site's tariff, HARP's re-executions included (option.py). Then:

- the cheapest option whose longest expected run (the longest run the evidence has, with the
  attempts killed before it) ends within the deadline;
- the fastest option (expected minutes) whose expected cost is within the budget;
- the Pareto set: the options no other is both cheaper and faster than (or as cheap and faster,
  or as fast and cheaper).

Run times and memory at each size come from the evidence (evidence.py) through sizing.py. A
fit that says larger runs took no less time is no evidence of scaling: then only the size asked
for is priced, and the others are listed as not compared.

docs/advice.md explains the answer to users.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from slurm_harp.advice.candidates import admitted, partitions, sizes
from slurm_harp.advice.evidence import Evidence, amount, evidence_of, request_size, run_size
from slurm_harp.advice.gpu_memory import HEADROOM, TrainingFacts, fewest_gpus
from slurm_harp.advice.option import GB, NOT_A_NUMBER, Option, Pricing
from slurm_harp.advice.partition_access import PartitionAccess
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.quote import same
from slurm_harp.advice.sizing import Memory, Scaling
from slurm_harp.advice.tariff import Tariff
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

__all__ = ["Advice", "Ask", "advise"]


@dataclass(frozen=True, slots=True)
class Ask:
    """What a user asks advice for."""

    job: JobRequest  # as submitted; ``user_name`` is the caller, set by the server
    partitions: tuple[str, ...] = ()  # the candidates' partitions; (): every partition known
    deadline_minutes: float | None = None
    budget: float | None = None  # in the tariff's currency
    training: TrainingFacts | None = None  # a DNN training: checks the model states fit a GPU
    exclusive: bool = False  # its own sbatch --exclusive: it holds whole nodes in every partition


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


def _is_gpu_job(ask: Ask, records: Sequence[JobRecord]) -> bool:
    if ask.training is not None or (ask.job.gpus_per_node or 0) > 0:
        return True
    if ask.job.gpus_per_node == 0:
        return False
    named = [r for r in records if r.request.job_name == ask.job.job_name]
    return bool(named) and all((r.request.gpus_per_node or 0) > 0 for r in named)


def _cpus_per_gpu(job: JobRequest, records: Sequence[JobRecord]) -> Fraction:
    """The job's CPUs a GPU, else its runs' median; 1 where neither says. Exact, so that the job's
    own size holds its own CPUs (6 on 4 GPUs: 3/2 a GPU; rounded down to 1, it was priced on 4)."""
    size = request_size(job, True)
    if size and job.min_cpus:
        return Fraction(job.min_cpus, size)
    ratios = sorted(
        Fraction(int(r.cores), run_size(r, True))
        for r in records
        if r.request.job_name == job.job_name and run_size(r, True) > 0
    )
    median = ratios[len(ratios) // 2] if ratios else Fraction(0)
    return median if median > 0 else Fraction(1)


def _cost_time(o: Option) -> tuple[float, float]:
    assert o.expected_cost is not None and o.expected_minutes is not None
    return same(o.expected_cost), same(o.expected_minutes)


def _pareto(options: Sequence[Option]) -> tuple[Option, ...]:
    """The options no other is at least as cheap and as fast as, and better in one."""
    return tuple(options[i] for i in undominated([_cost_time(o) for o in options]))


def undominated(points: Sequence[tuple[float, float]]) -> list[int]:
    """The indices, in order, of the (cost, minutes) points no other is at least as good as in
    both and better in one. By cost: a point is dominated when a cheaper one is as fast, or one
    as cheap is faster (n log n: a heavy ask has a thousand options or more)."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    kept, fastest_cheaper, k = [], math.inf, 0
    while k < len(order):
        cost, group = points[order[k]][0], []
        while k < len(order) and points[order[k]][0] == cost:
            group.append(order[k])
            k += 1
        fastest_here = points[group[0]][1]  # sorted: the group's fastest first
        kept += [i for i in group if points[i][1] < fastest_cheaper and points[i][1] <= fastest_here]
        fastest_cheaper = min(fastest_cheaper, fastest_here)
    return sorted(kept)


def advise(
    ask: Ask,
    records: Iterable[JobRecord],
    tariff: Tariff,
    shapes: Mapping[str, PartitionShape],
    gpu_memory_bytes: Mapping[str, float] | None = None,
    memory_floor_mb: float = 0.0,
    groups: Collection[str] | None = None,
    gpu_memory_headroom: float = HEADROOM,
    unread: Mapping[str, PartitionAccess] | None = None,
) -> Advice:
    """The advice for ``ask`` from ``records`` (the caller's runs; anyone else's are ignored),
    under ``tariff``, in the partitions of ``shapes`` (their sizes; a partition named by the ask
    but unknown there gets the sizes run and asked for). ``gpu_memory_bytes``: partition -> one
    GPU's memory, for the training check. ``memory_floor_mb``: no memory request from the peaks
    below this (harp.toml's policy.floor.memory_mb: a sampled peak may miss a short spike).
    ``groups``: the caller's group names, for partitions' AllowGroups (None: unknown).
    ``gpu_memory_headroom``: the part of a GPU's memory model states may not take.
    ``unread``: partitions whose scontrol description did not read this time, with whom each takes
    jobs from: one not in ``shapes`` is not priced, one there is priced on an earlier reading."""
    records = [
        r for r in records if ask.job.user_name is not None and r.request.user_name == ask.job.user_name
    ]
    gpu = _is_gpu_job(ask, records)
    evidence = evidence_of(ask.job, records, gpu)
    scaling = Scaling.fit(evidence.runs)
    requested = request_size(ask.job, gpu)
    gpu_memory = gpu_memory_bytes or {}
    cpus_per_gpu = _cpus_per_gpu(ask.job, records) if gpu else 0
    memory = Memory.of(evidence, ask.job, memory_floor_mb)
    pricing = Pricing(
        ask.job, gpu, cpus_per_gpu, evidence, scaling, tariff, memory, ask.training, gpu_memory,
        gpu_memory_headroom, ask.exclusive,
    )  # fmt: skip
    notes = _notes(ask, evidence, scaling, requested)
    if evidence.runs and not memory.known:
        notes.append("memory is not priced: no run's peak or request is known, nor yours")
    if memory.whole_node:
        notes.append("--mem=0 asks all of a node's memory: it is priced as a node of each partition holds")
    if ask.exclusive:
        notes.append(f"your --exclusive: a job holds whole nodes: priced with all their {_held(gpu)}")

    options: list[Option] = []
    unread = unread or {}
    unreadable = {name: access for name, access in unread.items() if name not in shapes}
    named = partitions(ask.partitions, ask.job.partition, shapes, tariff, notes, unreadable)
    compared = admitted(named, shapes, ask.job, groups, notes)
    for name in compared:
        shape = shapes.get(name)
        if name in unread and shape is not None:
            notes.append(
                f"partition {name}: sizes and limits of an earlier reading (its description does not read)"
            )
        if shape is None:
            notes.append(f"partition {name}: its size is unknown; only the sizes run or asked for are shown")
        if memory.whole_node and (shape is None or shape.mem_per_node_mb is None):
            notes.append(f"partition {name}: a node's memory is unknown, so --mem=0 is not priced")
        if ask.exclusive and shape is None:
            notes.append(f"partition {name}: a node's CPUs are unknown, so --exclusive is not priced")
        most = None if shape is None else (shape.most_gpus if gpu else shape.most_cpus)
        if shape is not None and most == 0:
            notes.append(f"partition {name}: has no {'GPUs' if gpu else 'CPUs'} for this job")
            continue
        if shape is not None and shape.exclusive:
            whole = f"a job holds whole nodes ({shape.exclusive})"
            notes.append(f"partition {name}: {whole}: priced with all their {_held(gpu)}")
        try:
            here = [pricing.option(name, shape, size) for size in sizes(most, evidence, requested, notes)]
        except ValueError as exc:  # one partition's odd bounds cost that partition, not the advice
            notes.append(f"partition {name}: not priced ({exc})")
            continue
        if any(o.note == NOT_A_NUMBER for o in here):
            notes.append(f"partition {name}: some options not priced: {NOT_A_NUMBER}")
        options += here
    if ask.training is not None:
        notes.append(_training_note(ask.training, gpu_memory, compared, shapes, gpu_memory_headroom))

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
        notes=tuple(dict.fromkeys(notes)),  # a note per partition says the same thing once
    )


def _held(gpu: bool) -> str:
    """What a job holding whole nodes is given of them, and billed."""
    return "CPUs and GPUs" if gpu else "CPUs"


def _notes(
    ask: Ask,
    evidence: Evidence,
    scaling: Scaling | None,
    requested: int | None,
) -> list[str]:
    notes = []
    job = ask.job
    if job.job_name is None:
        notes.append("the job has no name: HARP finds its history by its name (sbatch -J)")
    elif not evidence.runs:
        notes.append(f"no completed run of {job.job_name!r} by {job.user_name}: no evidence for any option")
    if evidence.runs and scaling is not None and scaling.low < scaling.high and not scaling.scales:
        notes.append(
            f"your runs at more {evidence.unit}s took no less time (log-log slope {scaling.slope:+.2f}): "
            "they did different work, so sizes are not compared; "
            + (
                f"only the size you asked for ({amount(requested, evidence.unit)}) is priced"
                if requested
                else f"give the {evidence.unit}s you would ask for to price them"
            )
        )
    if evidence.unused:
        what = ", ".join(f"{n} {state}" for state, n in sorted(evidence.unused.items()))
        notes.append(f"runs not used (they did not complete): {what}")
    if evidence.runs and job.script_signature is not None and evidence.signed:
        notes.append(
            "runs matched by script signature and name"
            if evidence.by_script
            else "runs matched by name (none has this script's signature)"
        )
    return notes


def _training_note(
    training: TrainingFacts,
    gpu_memory: Mapping[str, float],
    compared: Sequence[str],
    shapes: Mapping[str, PartitionShape],
    headroom: float,
) -> str:
    """The fewest GPUs that hold the model states, among the partitions compared and the GPU
    counts each holds (a partition of unknown size: any)."""
    if not gpu_memory:
        return "the GPUs' memory is not configured ([[advice.partition]]): the model states are not checked"
    memory = {name: gpu_memory[name] for name in compared if name in gpu_memory}
    most = {name: shapes[name].most_gpus for name in memory if name in shapes}
    fit = fewest_gpus(training, memory, most_gpus=most, headroom=headroom) if memory else None
    if fit is None:
        return "the model states fit no GPU count the partitions compared hold"
    return (
        f"the fewest GPUs that hold the model states: {fit.gpus} in {fit.partition} "
        f"({fit.need_bytes / GB:.1f} GB of {fit.usable_bytes / GB:.1f} GB per GPU)"
    )
