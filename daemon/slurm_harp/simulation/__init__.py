"""A discrete-event simulator of a space-shared cluster replaying a job trace under EASY or
Slurm-like backfilling, with the limits the scheduler plans with from a pluggable source.

Domain code: no gRPC, no server, no Slurm tool. Traces come in through ``trace`` only.

    from slurm_harp.simulation import catalog, load_workload, measure, simulate
    jobs = load_workload("KTH-SP2-1996-2.1-cln.swf.gz")
    result = simulate(jobs, catalog.scheduler("easy"), catalog.limits("easy++", jobs))
    print(measure(result).mean_bsld)
"""

from slurm_harp.simulation.engine import Result, simulate
from slurm_harp.simulation.schedule_metrics import Metrics, measure
from slurm_harp.simulation.trace import load_workload
from slurm_harp.simulation.workload import Workload

__all__ = ["Metrics", "Result", "Workload", "load_workload", "measure", "simulate"]
