"""Two guards on one job (the primary and the backup controller's, docs/guard.md): each computes its
own extension, and the lower one may land after the guard that set the higher saw it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import NamedTuple

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.core.extension import ConditionalRatios
from slurm_harp.guard import seen_file
from slurm_harp.guard.extension_history import ExtensionHistory
from slurm_harp.guard.loop import Guard
from slurm_harp.guard.lowered_limits import LATE_LANDING_S
from tests.unit.test_guard import SUBMITTED, FakeSlurm, line, make_guard

EXTEND = "harp:extend,t!=40,t0=600,v=x"


class History(ExtensionHistory):
    """A guard's jobs.extension.json as it read it: ``ratios`` None when it has not (yet)."""

    def __init__(self, ratios: ConditionalRatios | None) -> None:
        super().__init__(None)
        self._ratios = ratios


class Late(NamedTuple):
    slurm: FakeSlurm  # guard A's view of Slurm
    guard: Guard  # guard A
    registry: CollectorRegistry  # A's metrics
    a_limit: int  # A's extension, listed by A
    b_limit: int  # B's lower one, landed after it


def late_landing(tmp_path: Path, tag: str = EXTEND, landed: str = "38:20") -> Late:
    """Job 7, 110 s left of 40 min, listed by guard A (conditional: its ended jobs say 1.5 times
    the limit) and guard B (by steps: it has not read them yet), each with its own state file. B's
    update is slow; A sets its own and lists it; then B's lands, seen by A at run time ``landed``."""

    def guard(name: str, ratios: ConditionalRatios | None) -> tuple[FakeSlurm, Guard, CollectorRegistry]:
        slurm = FakeSlurm([line("7", "40:00", "38:10", tag)])
        (tmp_path / name).mkdir()
        guard, registry = make_guard(slurm, tmp_path / name)
        guard.configure(guard.settings, History(ratios))
        guard.poll()
        return slurm, guard, registry

    (b_slurm, _, _), (a_slurm, a, registry) = guard("b", None), guard("a", ConditionalRatios([1.5] * 50))
    [(_, b_limit)], [(_, a_limit)] = b_slurm.updates, a_slurm.updates
    listed(a_slurm, a, a_limit, "38:15", tag)
    listed(a_slurm, a, b_limit, landed, tag)
    return Late(a_slurm, a, registry, a_limit, b_limit)


def listed(slurm: FakeSlurm, guard: Guard, limit: int, used: str, tag: str = EXTEND) -> None:
    slurm.listing = line("7", f"{limit}:00", used, tag) + "\n"
    guard.poll()


def test_a_second_guards_lower_extension_is_no_lowering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The audit's case: its user asked 600 min; A sets 64, B 41. Before, A took B's for its user's
    # lowering and never extended the job again: with B gone, it was killed at 41 min.
    caplog.set_level(logging.INFO)
    late = late_landing(tmp_path)  # 160 s left of B's: not due yet
    assert late.b_limit < late.a_limit
    assert late.slurm.updates == [("7", late.a_limit)]  # no eager restore of A's own: no ping-pong
    assert late.registry.get_sample_value("harp_guard_shortened_jobs") == 1
    assert "taken for another guard's extension landing late" in caplog.text
    assert "limit lowered" not in caplog.text
    listed(late.slurm, late.guard, late.b_limit, f"{late.b_limit - 1}:00")  # due
    assert len(late.slurm.updates) == 2 and late.b_limit < late.slurm.updates[-1][1] <= 600


def test_a_lowering_to_the_limit_before_the_raise_is_still_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As above, then its user lowers the job to 40 min, the limit it had before A's raise: no guard
    # extension lands there, so that is a lowering, and A never raises the job past it.
    caplog.set_level(logging.INFO)
    late = late_landing(tmp_path)
    listed(late.slurm, late.guard, 40, "39:30")  # 30 s left
    assert late.slurm.updates == [("7", late.a_limit)]
    assert late.registry.get_sample_value("harp_guard_shortened_jobs") == 0
    assert "job 7: limit lowered from 41 to 40 min while it ran" in caplog.text  # from the landed 41


def test_a_lowering_once_the_job_outran_the_limit_before_the_raise_is_honoured(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # No guard's extension computed from 40 min lands once the job has run 5 min past it: a drop
    # then, even above 40, is its user's lowering, listed by the slurmctld seen holding the raise
    # (placed at the poll after it was first listed: before, any drop is taken for a restart's).
    caplog.set_level(logging.INFO)
    slurm = FakeSlurm([line("7", "40:00", "30:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    listed(slurm, guard, 64, "38:15")
    listed(slurm, guard, 64, "38:20")
    listed(slurm, guard, 50, f"{40 + LATE_LANDING_S // 60:.0f}:01")
    listed(slurm, guard, 50, "49:30")
    assert slurm.updates == [] and "job 7: limit lowered from 64 to 50 min while it ran" in caplog.text


def test_a_late_landing_falling_due_after_the_window_is_still_no_lowering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a review: the landed limit stayed below the highest seen, so once the 5 minutes
    closed, the next poll read it as a lowering, and the job was never extended: with the steps, 55
    landing under another guard's 64 falls due 8 minutes after the 40 it was raised from."""
    caplog.set_level(logging.INFO)
    slurm = FakeSlurm([line("7", "40:00", "30:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    listed(slurm, guard, 64, "38:15")
    listed(slurm, guard, 55, "38:20")
    listed(slurm, guard, 55, "45:05")
    listed(slurm, guard, 55, "53:30")  # 90 s left
    assert "limit lowered" not in caplog.text
    assert [job for job, _ in slurm.updates] == ["7"] and slurm.updates[0][1] > 55


def test_a_late_extension_never_takes_a_job_past_its_user_s_limit(tmp_path: Path) -> None:
    # Its user asked 50 min: A sets 50, B's 41 lands; A extends it again when due, to 50 at most.
    late = late_landing(tmp_path, "harp:extend,t!=40,t0=50,v=x", landed="40:30")
    assert late.slurm.updates == [("7", 50), ("7", 50)]


def test_the_limit_before_the_latest_raise_outlives_a_restart(tmp_path: Path) -> None:
    slurm = FakeSlurm([line("7", "40:00", "30:00", EXTEND)])
    guard, _ = make_guard(slurm, tmp_path)
    guard.poll()
    listed(slurm, guard, 64, "38:15")  # raised (by the other guard, or an admin)
    guard.close()
    state = tmp_path / "guard" / "limits.json"
    body = json.loads(state.read_text())
    assert body["raised_from"] == {"7": 40}
    assert body["jobs"]["7"] == [SUBMITTED, 0, False, 64, 64, 2295.0, None]  # as older guards read it
    assert seen_file.load(state) == guard._lowered.seen
    restarted, _ = make_guard(slurm, tmp_path)
    listed(slurm, restarted, 41, "40:00")  # a late 41: not a lowering, and due
    assert slurm.updates == [("7", 45)]


def test_a_file_without_raises_still_reads_and_bad_ones_are_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "limits.json"
    run = [SUBMITTED, 0, False, 64, 64, 2295.0, None]
    jobs = {"1": run, "2": run, "3": run, "4": run, "5": [SUBMITTED, 0, True, 64, 64, 0.0, None], "6": run}
    raised_from = {"2": 40, "3": 64, "4": -1, "5": 40, "6": True}  # 3 not below its highest; 5 pending
    state.write_text(json.dumps({"format": seen_file.FORMAT, "jobs": jobs, "raised_from": raised_from}))
    seen = seen_file.load(state)
    assert {job: s.raised_from for job, s in seen.items()} == {"1": None, "2": 40, **dict.fromkeys("3456")}
    assert "4 raised_from values that do not read ignored, their entries kept" in caplog.text
    state.write_text(json.dumps({"format": seen_file.FORMAT, "jobs": jobs, "raised_from": [40]}))
    assert seen_file.load(state) == {}
