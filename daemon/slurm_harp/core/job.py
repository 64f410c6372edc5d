"""One finished job as accounting saw it: what was asked and what happened."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_harp.core.request import JobRequest, Target

# States after which a job never runs again (sacct names; the other readers map onto them).
FINISHED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
# The job was stopped from outside before it ended on its own: its run time is a lower bound.
CENSORING_STATES = frozenset({"TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "PREEMPTED", "NODE_FAIL"})


@dataclass(frozen=True)
class JobRecord:
    """A finished job: what was asked (``request``) and what happened.

    ``censored`` means the job was stopped at a limit (TIMEOUT, OUT_OF_MEMORY, or in SWF a run
    at or past its request): its true run time (or memory) is at least the observed one.
    """

    job_id: str
    request: JobRequest
    state: str
    elapsed_s: int
    start_time: int | None = None
    end_time: int | None = None
    max_rss_mb: float | None = None  # peak resident memory per node
    total_cpu_s: float | None = None
    alloc_cpus: int | None = None
    censored: bool = False
    harp_tag: str | None = None  # the last harp tag of the job's admin comment (core.tag)

    # What the job asked for and used, per target: the one definition training and evaluation read.
    # Units: time in minutes, memory in MB per node, CPUs in CPUs.

    @property
    def cores(self) -> float:
        """The CPUs a run of this job holds (allocated, else requested, else 1)."""
        return float(self.alloc_cpus or self.request.min_cpus or 1)

    def requested(self, target: Target) -> float | None:
        """The user's request for ``target``. Memory per node, except for a per-CPU request with no
        node count (SWF traces), which stays per processor: the SWF reader reports the peak per
        processor too, and JobRequest.requested(MEMORY) would multiply it by the processor count."""
        request = self.request
        if target is Target.MEMORY and self.per_processor_memory:
            return None if request.mem_per_cpu_mb is None else float(request.mem_per_cpu_mb)
        return request.requested(target)

    def used(self, target: Target) -> float | None:
        """What the job used of ``target`` (None: unknown). CPUs: effective, TotalCPU / elapsed."""
        if target is Target.TIME:
            return self.elapsed_s / 60.0
        if target is Target.MEMORY:
            return self.max_rss_mb
        cpu = self.total_cpu_s
        return None if cpu is None or cpu < 0 or self.elapsed_s <= 0 else cpu / self.elapsed_s

    def stopped_at_limit(self, target: Target) -> bool:
        """Whether ``used(target)`` is only a lower bound: the job was stopped at that limit. A job is
        never stopped for its CPUs."""
        if target is Target.TIME:
            return self.censored
        return target is Target.MEMORY and self.state == "OUT_OF_MEMORY"

    def limit_units(self, target: Target) -> float:
        """How many of the target's units one limit value stands for: a memory limit applies per
        node (per processor where requested per CPU without a node count); 1 otherwise."""
        if target is not Target.MEMORY:
            return 1.0
        return self.cores if self.per_processor_memory else float(self.request.min_nodes or 1)

    @property
    def per_processor_memory(self) -> bool:
        """Whether the memory asked and used are per processor: a per-CPU request without a node
        count, as SWF traces give it (they tell no nodes). A record from sacct always has one
        (ReqNodes, else NNodes: a job that ran had a node). Never a live request's: the plugin
        sends no node count for a job submitted without -N, which is one node (JobRequest.requested)."""
        return self.request.mem_per_node_mb is None and self.request.min_nodes is None


def ended_by(end_time: float | None, at: float) -> bool:
    """Whether a job that ends at ``end_time`` had ended by unix time ``at`` (at or before it): the
    one meaning of "known at submit time" for history features, baselines and training windows.
    No end time: not known."""
    return end_time is not None and end_time <= at
