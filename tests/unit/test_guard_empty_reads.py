"""A read of the site's bounds that succeeds but holds nothing (scontrol or sacctmgr printing nothing,
exit 0): the last good read is kept, as when the command fails (guard.survey)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from slurm_harp.guard import guard_metrics as results
from slurm_harp.guard.slurm import ConfigAfterListing
from slurm_harp.guard.survey import Survey
from tests.unit.test_guard import NOW, FakeSlurm, count, line, make_guard

EXTEND = "harp:extend,t!=10,t0=600,v=x"


@pytest.mark.parametrize(
    ("kind", "bounded", "why"),
    [
        ("partitions", "PartitionName=batch MaxTime=00:15:00 State=UP QoS=N/A\n", "partition batch MaxTime"),
        ("qos", "normal|00:15:00|\n", "QOS normal MaxWall"),
    ],
)
def test_an_empty_read_keeps_the_last_good_bound(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str, bounded: str, why: str
) -> None:
    # A partition's MaxTime (or its QOS's MaxWall) of 15 min: the job, cut to 10, is extended to 11,
    # then refused past 15. A read that printed nothing made the bound none, and the job was
    # extended past the site's maximum, which Slurm lets an operator do.
    clock = [NOW]
    slurm = FakeSlurm([line("1", "10:00", "9:00", EXTEND)])
    setattr(slurm, kind, bounded)
    guard, registry = make_guard(slurm, tmp_path, clock=lambda: clock[0])
    guard.poll()
    assert slurm.updates == [("1", 11)]
    setattr(slurm, kind, "")  # exit 0, nothing printed
    clock[0] += 61  # the bounds are read again
    slurm.listing = line("1", "15:00", "14:00", EXTEND) + "\n"
    guard.poll()
    assert slurm.updates == [("1", 11)] and count(registry, results.REFUSED_BOUND) == 1
    assert f"not extended past 15 min ({why})" in caplog.text
    assert "the last read kept" in caplog.text


def test_an_empty_read_is_said_once_and_a_listing_read_again(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    slurm = FakeSlurm([])
    survey = Survey(slurm, ConfigAfterListing(slurm))
    survey.start_poll(NOW)
    read = survey.bounds
    assert read.node_cores["c1"] == 8 and read.partition_max_minutes == {} and read.qos.max_minutes
    slurm.partitions = slurm.qos = slurm.node_cores = ""
    for minute in (1, 2):
        survey.start_poll(NOW + 60 * minute)
        assert survey.bounds == read
    for what in ("partitions", "QOS", "node cores"):
        assert sum(r.getMessage().startswith(f"{what}: ") for r in caplog.records) == 1
    slurm.node_cores = "c[1-8]|1|4\n"
    survey.start_poll(NOW + 180)
    assert survey.bounds.node_cores["c1"] == 4 and "node cores listed again" in caplog.text
