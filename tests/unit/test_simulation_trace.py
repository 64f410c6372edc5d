"""The simulator on the bundled KTH-SP2 trace, read through the adapter."""

from __future__ import annotations

from pathlib import Path

from slurm_harp.simulation import catalog, load_workload, measure, simulate
from slurm_harp.simulation.trace import swf_processors
from tests.conftest import BUNDLED_TRACE


def test_the_swf_header_gives_the_machine_size(tmp_path: Path) -> None:
    assert swf_processors(BUNDLED_TRACE) == 100
    plain = tmp_path / "t.swf"
    job = "1 0 0 10 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1"
    plain.write_text(f"; MaxNodes: 64\n; MaxProcs: 128 (two per node)\n{job}\n")
    assert swf_processors(plain) == 128
    assert load_workload(plain).processors == 128
    assert load_workload(plain, processors=8).processors == 8


def test_easy_plus_plus_beats_easy_on_kth() -> None:
    # Tsafrir et al. (2007) report EASY -> EASY++ bounded slowdown 90 -> 57 on this trace.
    jobs = load_workload(BUNDLED_TRACE)
    easy = measure(simulate(jobs, catalog.scheduler("easy"), catalog.limits("request", jobs)))
    plus = measure(simulate(jobs, catalog.scheduler("easy"), catalog.limits("easy++", jobs)))
    assert plus.mean_bsld < 0.85 * easy.mean_bsld
    assert plus.mean_wait_s < easy.mean_wait_s
    assert easy.killed_early_jobs == plus.killed_early_jobs == 0
