"""The metrics' definitions, warm-up, and the report's files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slurm_harp.simulation import simulate
from slurm_harp.simulation.easy import Easy
from slurm_harp.simulation.limits import RequestLimits
from slurm_harp.simulation.schedule_metrics import bounded_slowdown, measure
from slurm_harp.simulation.schedule_report import Run, document, draw, table
from slurm_harp.simulation.workload import Workload


def test_bounded_slowdown_is_bounded_below_by_one_and_by_tau_for_short_jobs() -> None:
    wait = np.array([0.0, 90.0, 10.0, 0.0])
    run = np.array([5.0, 10.0, 100.0, 100.0])
    # (0+5)/10 -> 1 (bounded); (90+10)/10 = 10; (10+100)/100 = 1.1; a job that did not wait: 1.
    assert bounded_slowdown(wait, run).tolist() == pytest.approx([1.0, 10.0, 1.1, 1.0])
    # A 1-second job waiting 9 s: 10/10 = 1 with tau = 10 s, 10 with tau = 1 s.
    assert bounded_slowdown(np.array([9.0]), np.array([1.0]), tau=1).tolist() == [10.0]


def _serial(count: int) -> Workload:
    # One processor; each job runs 100 s, all submitted at 0: job i waits 100 i.
    return Workload.build(1, [(str(i), 0.0, 100.0, 100.0, 1, 0) for i in range(count)])


def test_warmup_jobs_are_simulated_but_not_measured() -> None:
    w = _serial(10)
    r = simulate(w, Easy(), RequestLimits(w))
    everything = measure(r, warmup=0)
    assert (everything.jobs, everything.warmup_jobs) == (10, 0)
    assert everything.mean_wait_s == 450
    later = measure(r, warmup=0.2)
    assert (later.jobs, later.warmup_jobs) == (8, 2)
    assert later.mean_wait_s == np.mean([100 * i for i in range(2, 10)])
    assert later.median_wait_s == 550


def test_utilisation_counts_processor_time_in_the_measured_window() -> None:
    # 4 processors; 2-wide jobs back to back from 0 to 1000, one 4-wide job submitted at 1000.
    rows = [(str(i), 100.0 * i, 100.0, 100.0, 2, 0) for i in range(10)] + [("w", 1000.0, 1.0, 1.0, 4, 1)]
    w = Workload.build(4, rows)
    r = simulate(w, Easy(), RequestLimits(w))
    # Window: first measured submission (0, no warm-up) to the last (1000): half the machine busy.
    assert measure(r, warmup=0).utilisation == pytest.approx(0.5)


def test_report_draws_a_table_json_and_two_plots() -> None:
    w = _serial(20)
    r = simulate(w, Easy(), RequestLimits(w))
    run = Run(r, measure(r))
    text = table([run], command="harp simulate x")
    # No warm-up job among 20 (1 % of 20 rounds down); waits 0, 100, ..., 1900: mean 950 s.
    assert "| easy | request | 0.26 | 0.26 |" in text
    doc = json.loads(json.dumps(document([run], command="harp simulate x")))
    assert doc["runs"][0]["mean_wait_s"] == 950
    pngs = draw([run], "serial")
    assert list(pngs) == ["serial-waits.png", "serial-bsld.png"]
    assert all(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000 for png in pngs.values())
