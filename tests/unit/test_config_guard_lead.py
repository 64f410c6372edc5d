"""The guard's lead against the shortest time limit harp sets, where a mode relies on the guard
(config/guard_lead.py): a job cut to that limit is always found due by a poll before it ends."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.config import ConfigError, load, parse
from slurm_harp.core.extension import due
from slurm_harp.core.request import Target
from tests.conftest import REPO
from tests.unit.test_config import refused_by_check_config
from tests.unit.test_deploy_role import ROLE, render, role_vars

# The audit's file: check-config said ok, and a job cut to the 10-minute floor timed out at 601 s,
# before the guard's first poll at 900 s, 50 minutes before its user's own limit.
SLOW_GUARD = "[guard]\npoll_seconds = 900\nlead_seconds = 1800\nstale_seconds = 1800\n"
REFUSED = {
    f"[policy]\nmode = 'extend'\n{SLOW_GUARD}": (
        "guard.lead_seconds: 1800 s is longer than the shortest time limit harp sets, 600 s "
        "(policy.floor.time_minutes = 10), with policy.mode = 'extend', which only the guard keeps from "
        "killing a job before its user's limit: a job cut to that limit is due from its start and could "
        "time out before the guard's next poll (guard.poll_seconds = 900); set "
        "policy.floor.time_minutes to at least 30, or guard.lead_seconds to at most 600 (and "
        "guard.poll_seconds to at most half of it)"
    ),
    # A floor of 0 is a limit of one minute (Policy.proposed): the default lead of 120 s is longer.
    "[policy]\nmode = 'time_min'\n[policy.floor]\ntime_minutes = 0\n": (
        "guard.lead_seconds: 120 s is longer than the shortest time limit harp sets, 60 s "
        "(policy.floor.time_minutes = 0, in whole minutes and at least 1), with policy.mode = 'time_min'"
    ),
    "[policy.floor]\ntime_minutes = 1.5\n[[policy.rule]]\npartition = 'debug'\nmode = 'rewrite'\n"
    "[[policy.rule]]\naccount = 'lab'\nmode = 'extend'\n[guard]\nlead_seconds = 150\n": (
        "guard.lead_seconds: 150 s is longer than the shortest time limit harp sets, 120 s "
        "(policy.floor.time_minutes = 1.5, in whole minutes and at least 1), with "
        "policy.rule[1].mode = 'extend'"
    ),
}


@pytest.mark.parametrize("text", REFUSED, ids=["audit's", "floor 0", "a rule's mode"])
def test_a_lead_longer_than_the_shortest_limit_is_refused_where_a_mode_relies_on_the_guard(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    path, line = refused_by_check_config(tmp_path, caplog, text)
    assert line.startswith(f"{path}: {REFUSED[text]}"), line


@pytest.mark.parametrize(
    "text",
    [
        "[policy]\nmode = 'extend'\n[policy.floor]\ntime_minutes = 30\n" + SLOW_GUARD,  # 1800 s, the lead
        "[policy]\nmode = 'time_min'\n[policy.floor]\ntime_minutes = 0\n"
        "[guard]\npoll_seconds = 30\nlead_seconds = 60\nstale_seconds = 60\n",
        "[policy]\nmode = 'extend'\n",  # the defaults: a floor of 10 minutes, a lead of 120 s
        "[policy]\nmode = 'extend'\n[policy.floor]\ntime_minutes = 2\n",  # 120 s, the default lead
        "[policy]\nmode = 'extend'\n[policy.floor]\ntime_minutes = 1\n"
        "[guard]\npoll_seconds = 30\nlead_seconds = 60\nstale_seconds = 60\n",
        # No mode relies on the guard: no job runs below its request waiting for an extension.
        "[policy]\nmode = 'rewrite'\n" + SLOW_GUARD,
        "[policy]\nmode = 'shadow'\n[[policy.rule]]\npartition = 'a'\nmode = 'off'\n" + SLOW_GUARD,
    ],
    ids=[
        "floor at the lead",
        "floor 0, lead 60",
        "defaults",
        "floor 2, default lead",
        "floor 1, lead 60",
        "rewrite",
        "shadow, off",
    ],
)
def test_a_lead_no_longer_than_the_shortest_limit_or_no_guarded_mode_is_read(text: str) -> None:
    parse(tomllib.loads(text))


def _role_harp_toml(**overrides: Any) -> dict[str, Any]:
    variables = role_vars(
        __slurm_harp_slurm_user="slurm",
        __slurm_harp_slurm_group="slurm",
        __slurm_harp_socket_group="slurm",
        role_path=str(ROLE),
        **overrides,
    )
    return tomllib.loads(str(render((ROLE / "templates" / "harp.toml.j2").read_text(), variables)))


@pytest.mark.parametrize("mode", ["time_min", "extend"])
def test_the_shipped_files_and_the_roles_defaults_pass_in_the_modes_that_rely_on_the_guard(
    tmp_path: Path, mode: str
) -> None:
    example = (REPO / "deploy" / "config" / "harp.toml").read_text()
    assert example.count('mode = "shadow"') == 1
    path = tmp_path / "harp.toml"
    path.write_text(example.replace('mode = "shadow"', f'mode = "{mode}"'))
    assert load(path).policy.default_mode == mode
    assert parse(_role_harp_toml(slurm_harp_policy_mode=mode)).policy.default_mode == mode
    rules = [{"partition": "debug", "mode": mode}]
    assert parse(_role_harp_toml(slurm_harp_policy_rules=rules)).policy.needs_guard


def _time_left_at_first_due_poll(start: float, limit_s: int, poll: float, lead: float) -> float | None:
    """What is left of the limit of a job started at ``start`` (of ``limit_s`` seconds) when the
    first of the guard's polls (at 0, poll, 2 poll, ...) finds it due; None if no poll does before
    the limit ends."""
    t = math.ceil(start / poll) * poll
    while t < start + limit_s:
        if due(limit_s // 60, t - start, lead):
            return start + limit_s - t
        t += poll
    return None


@pytest.mark.parametrize("floor", [0, 1, 2, 5, 10, 30])
@pytest.mark.parametrize("poll", [1, 5, 15, 30, 60, 300, 900])
def test_the_guard_keeps_its_lead_before_a_job_cut_to_the_floor_exactly_where_the_file_is_read(
    floor: int, poll: int
) -> None:
    """The claim the check rests on. Where it reads the file, a poll finds a job cut to the shortest
    limit due with at least lead - poll left (at least half the lead, and a whole poll), wherever in
    the poll cycle the job started; where it refuses the file, a job started just after a poll is
    found with less, or not before its limit (the audit's: poll 900, lead 1800, floor 10)."""
    for lead in sorted({30, 60, 120, 600, 1800, 2 * poll, 4 * poll}):
        if lead < max(30, 2 * poll):
            continue  # refused on its own: a lead of 30 s at least, and at least twice the poll
        text = f"[policy]\nmode = 'extend'\n[policy.floor]\ntime_minutes = {floor}\n[guard]\n"
        text += f"poll_seconds = {poll}\nlead_seconds = {lead}\nstale_seconds = {2 * lead}\n"
        limit_s = 60 * max(floor, 1)
        left = [_time_left_at_first_due_poll(s, limit_s, poll, lead) for s in (0, 0.5, poll / 2, poll - 0.5)]
        try:
            assert parse(tomllib.loads(text)).policy.proposed(Target.TIME, 0.0) * 60 == limit_s
        except ConfigError:
            assert any(t is None or t < lead - poll for t in left), (floor, poll, lead, left)
        else:
            assert all(t is not None and t >= lead - poll for t in left), (floor, poll, lead, left)
