"""benchmarks.bench_train still trains memory: an SWF trace's memory is per processor, which
training leaves out (learning.targets.per_node_only), so its jobs are given memory per node."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.bench_train import extend
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.request import Target
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.family import FamilyConfig
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.learning.trainer import train_target

QUICK = MethodConfig(
    family=FamilyConfig(
        quantiles=(0.5, 0.9), compare=(), params=BoosterParams(n_estimators=20, num_leaves=15)
    )
)


def _trace(path: Path, jobs: int) -> None:
    """An SWF trace of 4-processor jobs asking 2000 MB per processor and using about 1000."""
    rng = np.random.default_rng(4)
    lines = []
    for i in range(jobs):
        run, used_kb = int(rng.integers(600, 3000)), int(rng.uniform(900, 1100) * 1024)
        # job submit wait run alloc cpu used_mem req_procs req_time req_mem status user group app
        # queue partition preceding think
        fields = (
            i + 1,
            600 * i,
            10,
            run,
            4,
            run * 0.9,
            used_kb,
            4,
            3600,
            2000 * 1024,
            1,
            i % 5,
            1,
            i % 7,
            1,
            1,
            -1,
            -1,
        )
        lines.append(" ".join(str(f) for f in fields))
    path.write_text("; UnixStartTime: 800000000\n" + "\n".join(lines) + "\n")


def test_the_extended_jobs_carry_memory_per_node_and_memory_trains(tmp_path: Path) -> None:
    """Written as SWF, bench_train's `--target all` runs trained no memory model once training left
    a trace's per-processor memory out. Now its job store holds memory per node, as sacct has it."""
    trace, db = tmp_path / "trace.swf", tmp_path / "jobs.sqlite"
    _trace(trace, 400)
    assert extend(trace, 1000, db, processors_per_node=2) == 1000
    with JobStore(db, readonly=True) as store:
        records = sorted(store.records(), key=lambda r: int(r.job_id))
    assert len({r.job_id for r in records}) == 1000
    submits = [r.request.submit_time or 0 for r in records]
    assert submits == sorted(submits) and submits[400] > (records[399].end_time or 0)  # a copy after
    first = records[0]
    assert not any(r.per_processor_memory for r in records) and first.request.min_nodes == 2
    # Two processors on each node: the node asks and holds twice the trace's per-processor figures.
    assert first.requested(Target.MEMORY) == 4000.0
    assert 1800 < (first.used(Target.MEMORY) or 0) < 2200
    result = train_target(records, Target.MEMORY, QUICK)
    assert result.card["training"]["rows_per_processor_left_out"] == 0
    assert result.card["training"]["rows_train"] > 500
