"""A QOS's and an association's MaxWall bound the guard's extensions only where slurmctld enforces
limits (AccountingStorageEnforce, guard.enforcement; Slurm faked at the subprocess boundary).

The audit's job throughout: asked 600 min, cut by harp to 40, on account students (MaxWall 2 hours)
or in a partition whose QOS has a MaxWall of 2 hours. Without `limits` Slurm 22.05 runs such a job to
its 600 min (job_mgr.c and acct_policy.c check either MaxWall under ACCOUNTING_ENFORCE_LIMITS alone);
a guard that stopped extending it at 120 had it killed there, before its user's own limit.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.enforcement import Enforcement, enforce_words, sets_limits
from slurm_harp.guard.slurm import Completed, ConfigAfterListing
from tests.unit.test_guard import NOW, FakeSlurm, count, line, make_guard
from tests.unit.test_guard_associations import EXTEND, STUDENTS, run_to_the_end

CAPPED = [41, 45, 55, 70, 100, 120]  # stopped at the MaxWall of 2 hours
OWN = [41, 45, 55, 70, 100, 160, 340, 600]  # extended by steps to its user's own 600
# As scontrol prints slurm.conf's setting (``limits``: associations,limits), and as slurm.conf may
# spell it (read_config.c: any case, "2" for limits, "all" setting every word).
ENFORCED = [
    "associations,limits",
    "associations,limits,safe",
    "associations,limits,qos",
    "Limits",
    "2",
    "all",
]
NOT_ENFORCED = ["none", "associations", "associations,qos", "associations,wckeys", "nojobs,nosteps", "1"]


def site(enforce: str | None, bound_by: str) -> FakeSlurm:
    """Slurm with a MaxWall of 2 hours on account students (``association``) or on the partition's
    QOS (``qos``), and AccountingStorageEnforce ``enforce`` (None: not printed)."""
    slurm = FakeSlurm([])
    slurm.enforce = enforce
    if bound_by == "association":
        slurm.associations = STUDENTS
    else:
        slurm.partitions = "PartitionName=batch MaxTime=UNLIMITED State=UP QoS=short\n"
        slurm.qos = "normal||\nshort|02:00:00|\n"
    return slurm


@pytest.mark.parametrize("bound_by", ["association", "qos"])
@pytest.mark.parametrize(
    ("enforce", "enforced"), [(e, True) for e in ENFORCED] + [(e, False) for e in NOT_ENFORCED]
)
def test_the_maxwall_caps_the_extensions_only_where_limits_are_enforced(
    tmp_path: Path, enforce: str, enforced: bool, bound_by: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Without limits Slurm runs the job to its own 600 min whatever the MaxWall: capped at 120 (the
    # guard before), it was killed there.
    caplog.set_level(logging.INFO)
    extensions, registry = run_to_the_end(site(enforce, bound_by), tmp_path)
    assert extensions == (CAPPED if enforced else OWN)
    assert count(registry, results.CAPPED) == count(registry, results.REFUSED_BOUND) == enforced
    assert count(registry, results.REACHED_REQUEST) == (not enforced)
    said = "enforces limits" if enforced else "enforces no limits"
    assert f"slurmctld {said} (AccountingStorageEnforce=" in caplog.text


def test_a_partition_maxtime_bounds_whatever_is_enforced(tmp_path: Path) -> None:
    # slurmctld checks a partition's MaxTime whatever AccountingStorageEnforce says.
    slurm = site("none", "association")
    slurm.partitions = "PartitionName=batch MaxTime=02:00:00 State=UP QoS=N/A\n"
    assert run_to_the_end(slurm, tmp_path)[0] == CAPPED


@pytest.mark.parametrize("fault", ["exit 1: slurm_load_ctl_conf error", "no AccountingStorageEnforce line"])
def test_a_setting_that_does_not_read_keeps_the_last_read_and_none_read_bounds_nothing(
    tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Never read: neither MaxWall bounds a job (an error at each minute's read), rather than stop
    # jobs at a limit Slurm may not enforce. Once read, kept while reads fail. Each poll a minute
    # later, a new job cut to 40 min is due at 100: its next step is 160, students' MaxWall 120.
    slurm = site("associations,limits", "association")
    clock = [NOW]
    guard, _ = make_guard(slurm, tmp_path, clock=lambda: clock[0])

    def extended(job: str, setting: str, broken: bool) -> int:
        slurm.enforce, slurm.config_fails = setting, False
        if broken and fault.startswith("exit"):
            slurm.config_fails = True
        elif broken:
            slurm.enforce = None
        slurm.listing = line(job, "1:40:00", "1:38:30", EXTEND, account="students") + "\n"
        clock[0] += 61  # the bounds are read again
        guard.poll()
        return slurm.updates[-1][1]

    assert extended("5", "associations,limits", broken=True) == 160
    assert f"slurmctld's AccountingStorageEnforce does not read ({fault}" in caplog.text
    assert "no QOS or association MaxWall bounds an extension until it reads" in caplog.text
    assert any(r.levelno == logging.ERROR and "does not read" in r.getMessage() for r in caplog.records)
    assert extended("6", "associations,limits", broken=False) == 120
    assert extended("7", "associations,limits", broken=True) == 120
    assert "the last read kept (associations,limits)" in caplog.text
    assert extended("8", "associations", broken=False) == 160
    assert extended("9", "associations,limits", broken=True) == 160
    assert "the last read kept (associations)" in caplog.text


def test_the_setting_reads_as_slurm_reads_it(caplog: pytest.LogCaptureFixture) -> None:
    text = "BOOT_TIME = 2027-01-15T07:00:00\nAccountingStorageEnforce = associations,limits,safe\n"
    assert enforce_words(text) == {"associations", "limits", "safe"}
    assert sets_limits(enforce_words("AccountingStorageEnforce = Associations, SAFE\n"))
    assert not sets_limits(enforce_words("AccountingStorageEnforce = none\n"))
    assert not sets_limits(enforce_words("AccountingStorageEnforce = \n"))
    # A key that begins with it is not it.
    with pytest.raises(ValueError, match="no AccountingStorageEnforce line"):
        enforce_words(
            "AccountingStorageEnforceX = limits\nAccountingStorageType = accounting_storage/slurmdbd\n"
        )
    # A word a later Slurm may print sets nothing here, said as it is first read.
    printed = ["associations,limits,future"]
    config = ConfigAfterListing(lambda argv: Completed(0, f"AccountingStorageEnforce = {printed[0]}\n", ""))
    enforcement = Enforcement(config)
    assert enforcement.read()
    config.new_poll()
    assert enforcement.read()
    assert caplog.text.count("AccountingStorageEnforce: future not known here") == 1
    printed[0] = "future"
    config.new_poll()
    assert not enforcement.read()


def test_a_first_read_that_fails_is_tried_again_at_the_next_poll(tmp_path: Path) -> None:
    """The review: one `scontrol show config` failing at the guard's start (a timeout, slurmctld
    restarting) left an enforced QOS MaxWall unapplied for a minute, where before it always bound."""
    slurm = site("associations,limits", "qos")
    clock = [NOW]
    guard, _ = make_guard(slurm, tmp_path, clock=lambda: clock[0])
    for job, fails, extended in (("5", True, 160), ("6", False, 120), ("7", False, 120)):
        slurm.config_fails = fails
        slurm.listing = line(job, "1:40:00", "1:38:30", EXTEND) + "\n"
        guard.poll()
        assert slurm.updates[-1] == (job, extended)
        clock[0] += 5  # polls within the minute the other bounds are kept for
