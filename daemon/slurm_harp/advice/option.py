"""One way of running a job (a partition and a size), priced: or why it is not.

An option's allocation holds its size on the fewest nodes of the partition (at least its MinNodes;
the job's own size on its own -N), each of its tasks on one node, with the memory the evidence says
it needs (sizing.py), and the CPUs that memory takes under the partition's MaxMemPerCPU, as
slurmctld sets them; in a partition that gives jobs whole nodes, or for a job of its own
``--exclusive``, every CPU and GPU of its nodes. A GPU job holds its own CPUs at its own size, and
as many a GPU at the others, rounded up. Its run times come from the user's runs at that size or
from a fit between the sizes run; a fit that says larger runs took no less time prices the size
asked for alone. The quote is the cheapest first time limit under the site's tariff, HARP's
re-executions included (quote.py). An option that does not fit (nodes, a task's CPUs, memory, CPUs
beside the GPUs, the model states of a training) or has no run times is listed with a note and no
quote.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from slurm_harp.advice.evidence import Evidence, request_size
from slurm_harp.advice.gpu_memory import HEADROOM, TrainingFacts, model_state_bytes, usable_bytes
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.quote import Allocation, Quote, cheapest_limit
from slurm_harp.advice.reexecution import charged_minutes
from slurm_harp.advice.sizing import Memory, Scaling
from slurm_harp.advice.survival import Empirical
from slurm_harp.advice.tariff import Tariff
from slurm_harp.core.request import JobRequest

__all__ = ["GB", "NOT_A_NUMBER", "Option", "Pricing", "task_cpus"]

NO_MAX_TIME = 366 * 1440  # the cap on attempts in a partition without MaxTime (minutes)
GB = 1e9
# harp.toml's prices and weights are bounded (config/advice.py), Slurm's TRESBillingWeights only finite
NOT_A_NUMBER = "cost too large to be a number (the site's billing weights or price)"


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
class Pricing:
    """What every option of one job is priced with: the job, its evidence and the site's tariff."""

    job: JobRequest
    gpu: bool
    # CPUs beside each GPU (0 for a CPU job), exact: 6 CPUs on 4 GPUs are 3/2, not 1
    cpus_per_gpu: Fraction | int
    evidence: Evidence
    scaling: Scaling | None
    tariff: Tariff
    memory: Memory
    training: TrainingFacts | None = None  # a DNN training: its model states must fit a GPU
    gpu_memory: Mapping[str, float] | None = None  # partition -> one GPU's memory (bytes)
    gpu_headroom: float = HEADROOM  # the part of a GPU's memory model states may not take
    exclusive: bool = False  # the job's own --exclusive: whole nodes in every partition
    # size -> its run times, label and refusal: the same in every partition, so read once
    _at: dict[int, tuple[Empirical | None, str, str]] = field(default_factory=dict, init=False, repr=False)

    def run_times(self, size: int) -> tuple[Empirical | None, str, str]:
        """The run times at ``size`` (None: not priced), what they rest on, why not priced."""
        if size not in self._at:
            minutes, label, refused = _run_times(
                self.evidence, self.scaling, size, request_size(self.job, self.gpu)
            )
            self._at[size] = (None if minutes is None else Empirical(minutes), label, refused)
        return self._at[size]

    def cpus_at(self, size: int) -> int:
        """The CPUs an option of ``size`` asks: a CPU job's size; a GPU job's CPUs a GPU times its
        GPUs, rounded up (its own size: its own CPUs)."""
        return max(1, math.ceil(size * self.cpus_per_gpu)) if self.gpu else size

    def option(self, name: str, shape: PartitionShape | None, size: int) -> Option:
        """``size`` CPUs (GPUs for a GPU job) in partition ``name`` (``shape``: None if unknown)."""
        job, gpu = self.job, self.gpu
        requested = request_size(job, gpu)
        cpus = self.cpus_at(size)
        asked = job.min_nodes if size == requested and job.min_nodes else None  # its own -N, its own size
        if shape is None:
            nodes = max(asked or 1, 1)
        else:
            per_task = None if gpu else task_cpus(job, size)
            if per_task is not None and 0 < shape.cpus_per_node < per_task:  # sbatch refuses it
                note = f"one task's CPUs must fit one node: a node has {shape.cpus_per_node} here"
                return Option(name, size, Allocation(cpus=cpus), self.run_times(size)[1], note=note)
            fewest = shape.nodes_for_gpus(size) if gpu else shape.nodes_for_tasks(size, per_task)
            if fewest is None:  # the advice's sizes stay within the partition, but not always its tasks
                return Option(name, size, Allocation(cpus=cpus), "", note="does not fit the partition")
            held, why = _nodes(shape, fewest, size, asked, "GPU" if gpu else "CPU")
            if held is None:
                return Option(name, size, Allocation(cpus=cpus), self.run_times(size)[1], note=why)
            nodes = held
        held_cpus, gpus = cpus, size if gpu else 0
        # whole nodes (the partition's or the job's own --exclusive): slurmctld gives and bills all of them
        if shape is not None and (shape.exclusive or self.exclusive):
            held_cpus = max(cpus, nodes * shape.node_cpus)
            gpus = max(gpus, nodes * shape.gpus_per_node) if gpu else 0
        mem_node = self.memory.per_node(size, nodes, held_cpus)  # --mem-per-cpu: a CPU held, each
        if self.memory.whole_node:  # --mem=0: a node's memory, unknown without the shape (a note says so)
            mem_node = (None if shape is None else shape.mem_per_node_mb) or 0.0
        gpu_type = shape.gpu_type if gpu and shape is not None else None
        allocation = Allocation(
            cpus=held_cpus, mem_mb=mem_node * nodes, nodes=nodes, gpus=gpus, gpu_type=gpu_type
        )
        runtime, label, refused = self.run_times(size)
        if shape is not None and gpu and cpus > shape.cpus_per_node * nodes:
            return Option(name, size, allocation, label, note=f"{cpus} CPUs do not fit on {nodes} node(s)")
        room = None if shape is None else shape.mem_per_node_mb
        if room is not None and mem_node > room:
            note = f"needs {mem_node:.0f} MB per node; a node has {room:.0f} MB"
            return Option(name, size, allocation, label, note=note)
        raised = ""
        if shape is not None and shape.max_mem_per_cpu_mb is not None:
            held, raised = _cpus_for_memory(shape, shape.max_mem_per_cpu_mb, held_cpus, nodes, mem_node)
            if held is None:
                return Option(name, size, allocation, label, note=raised)
            allocation = replace(allocation, cpus=held)
        if self.training is not None:
            need = model_state_bytes(self.training, size)
            has = (self.gpu_memory or {}).get(name)
            if has is not None and need > (usable := usable_bytes(has, self.gpu_headroom)):
                note = (
                    f"model states need {need / GB:.1f} GB per GPU; a GPU here holds {usable / GB:.1f} GB "
                    f"of them ({has / GB:.1f} less {self.gpu_headroom * 100:g} %)"
                )
                return Option(name, size, allocation, label, note=note)
        if runtime is None:
            return Option(name, size, allocation, label, note=refused)
        # One rule with quote.price: a MaxTime of 0 is a bound (no job runs there), not "no limit"
        bounds = (None if shape is None else shape.max_minutes, self.tariff.partition(name).max_minutes)
        cap = float(min((b for b in bounds if b is not None), default=NO_MAX_TIME))
        if cap == 0:
            return Option(name, size, allocation, label, note="closed (MaxTime=0)")
        floor = self.job.time_min_minutes or 1  # slurmctld refuses a limit below --time-min
        if floor > cap:
            note = f"--time-min={floor} is above the {cap:.0f} minutes a job may have here: Slurm refuses it"
            return Option(name, size, allocation, label, note=note)
        quote = cheapest_limit(self.tariff, name, allocation, runtime, cap, floor)
        if not math.isfinite(quote.expected_cost):  # inf, or NaN where a price of 0 meets it
            return Option(name, size, allocation, label, note=NOT_A_NUMBER)
        longest = charged_minutes(quote.configuration.limit_minutes, quote.cap_minutes, runtime.values[-1])
        past = "" if quote.p_unfinished == 0 else "runs past the partition's MaxTime: cannot finish"
        note = "; ".join(n for n in (raised, past) if n)
        return Option(name, size, allocation, label, quote=quote, longest_minutes=longest, note=note)


def task_cpus(job: JobRequest, size: int) -> int | None:
    """The CPUs one task of ``job`` holds at ``size`` CPUs; a task runs on one node. One task (``-c``
    without ``-n``, or ``-n 1``) holds them all; tasks of several CPUs (``-n 4 -c 8``) keep theirs, the
    size counting the tasks. None: tasks of one CPU, or a layout the job does not say (spread freely)."""
    if job.num_tasks == 1 or (job.num_tasks is None and job.cpus_per_task is not None):
        return size
    if job.cpus_per_task is not None and job.cpus_per_task > 1:
        return min(job.cpus_per_task, size)
    return None


def _nodes(
    shape: PartitionShape, fewest: int, size: int, asked: int | None, unit: str
) -> tuple[int | None, str]:
    """The nodes an option of ``size`` holds in ``shape`` as slurmctld sets them: the ``fewest``
    that hold it, or the job's own ``-N`` (``asked``), and at least the partition's MinNodes, which
    a job without ``-N`` is given; None and why where Slurm would not run it (``-N`` below
    MinNodes, which sbatch also makes the most, or above what a job may have)."""
    least = shape.min_nodes
    if asked is not None and asked < least:
        return None, f"asks {asked} nodes; a job here has at least {least} (MinNodes)"
    if asked is None and size < least:  # a node of the job holds one CPU (GPU) at least
        return None, f"a job here has at least {least} nodes (MinNodes), each with a {unit}"
    nodes = max(fewest, least if asked is None else asked)
    if nodes > shape.job_nodes:
        return None, f"{'asks' if asked else 'needs'} {nodes} nodes; a job may have {shape.job_nodes} here"
    return nodes, ""


def _cpus_for_memory(
    shape: PartitionShape, per_cpu: float, cpus: int, nodes: int, mem_node: float
) -> tuple[int | None, str]:
    """The CPUs a job of ``cpus`` on ``nodes`` holding ``mem_node`` MB a node is given where a CPU
    may have ``per_cpu`` MB (MaxMemPerCPU): slurmctld raises its CPUs a node to the memory's share
    (_valid_pn_min_mem), and bills them. None where a node has too few; a note says what changed."""
    need = math.ceil(mem_node / per_cpu)
    if need <= math.ceil(cpus / nodes):
        return cpus, ""
    if shape.cpus_per_node and need > shape.cpus_per_node:
        return None, (
            f"needs {mem_node:.0f} MB per node: {need} CPUs a node at MaxMemPerCPU={per_cpu:g}; "
            f"a node has {shape.cpus_per_node}"
        )
    held = need * nodes
    return held, f"Slurm gives it {held} CPUs for {mem_node:.0f} MB a node (MaxMemPerCPU={per_cpu:g})"


def _run_times(
    evidence: Evidence, scaling: Scaling | None, size: int, requested: int | None
) -> tuple[tuple[float, ...] | None, str, str]:
    """The run times at ``size`` (None: not priced), what they rest on, and why not priced.
    A fit that does not scale prices the size asked for alone: by its own runs where there are
    some, else by the fit between the sizes run."""
    if scaling is None or not scaling.low <= size <= scaling.high:
        return None, "no evidence", ""
    if scaling.low == scaling.high:
        return scaling.minutes(size), evidence.describe(), ""
    if scaling.scales:
        return scaling.minutes(size), f"fit of {evidence.describe()}", ""
    if size != requested:
        return None, "not compared", f"your runs at more {evidence.unit}s took no less time"
    here = tuple(r.minutes for r in evidence.runs if r.size == size)
    if here:
        return here, f"{len(here)} run{'s' if len(here) != 1 else ''} at this size", ""
    return scaling.minutes(size), f"fit of {evidence.describe()}", ""
