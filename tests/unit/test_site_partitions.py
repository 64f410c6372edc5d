"""The advice reads each partition's scontrol record on its own (advice/site_partitions.py): one
that does not read costs that partition alone, says which field, keeps no stale access rule, and
gives notes that match what was priced."""

from __future__ import annotations

import pytest

from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.site_partitions import SitePartitions
from slurm_harp.advice.tariff import Prices, Tariff
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

BATCH = "PartitionName=batch State=UP MaxTime=60 TotalCPUs=8 TotalNodes=1 TRES=cpu=8,mem=8000M,node=1"
GPU = "PartitionName=gpu State=UP MaxTime=60 TotalCPUs=64 TotalNodes=2 TRES=cpu=64,node=2"
RUNS = [
    JobRecord(
        job_id=str(i),
        request=JobRequest(user_name="ann", job_name="sim", min_cpus=2),
        state="COMPLETED",
        elapsed_s=600,
        alloc_cpus=2,
    )
    for i in range(3)
]


def advice(site: SitePartitions, *named: str, own: str | None = None) -> Advice:
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=2, partition=own)
    return advise(
        Ask(job, partitions=named),
        RUNS,
        Tariff.of(Prices(), site.table),
        site.shapes,
        unread={name: unread.access for name, unread in site.unread.items()},
    )


def priced(advice: Advice) -> set[str]:
    return {o.partition for o in advice.options}


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("MaxTime=forever", "MaxTime: time limit 'forever'"),
        ("MaxMemPerNode=lots", "MaxMemPerNode: memory 'lots'"),
        ("MaxMemPerCPU=lots", "MaxMemPerCPU: memory 'lots'"),
        ("TRES=cpu=64,mem=lots,node=2", "TRES mem: memory 'lots'"),
        (f"TRES=cpu=64,mem={'9' * 40},node=2", "TRES mem: number out of range"),
        ("TRES=cpu=64,gres/gpu=lots,node=2", "TRES gres/gpu: bad count 'lots'"),
        ("TotalNodes=4294967294", "TotalNodes: '4294967294': a total Slurm does not know"),
        ("TotalCPUs=Unknown", "TotalCPUs: 'Unknown': a total Slurm does not know"),
        ("MaxNodes=x", "MaxNodes: bad count 'x'"),
        ("TRESBillingWeights=CPU=x", "TRESBillingWeights 'CPU=x'"),
    ],
)
def test_what_does_not_read_is_named_by_its_field(field: str, said: str) -> None:
    """The daemon's log names the field: MaxTime, a memory limit and TRES mem said only "memory
    'lots'", and a NO_VAL total read as 0 CPUs (the advice said "has no CPUs for this job")."""
    key = field.split("=", 1)[0]
    odd = " ".join(w for w in GPU.split() if not w.startswith(f"{key}=")) + f" {field}"
    site = SitePartitions.read(f"{BATCH}\n{odd}")
    assert set(site.shapes) == {"batch"} and site.unread["gpu"].why.startswith(said), site.unread
    named = advice(site, "gpu")
    assert "not compared, scontrol's description of it does not read: gpu" in named.notes


def test_a_partition_kept_from_an_earlier_reading_takes_whom_it_admits_from_the_new_one() -> None:
    """Its sizes and billing are kept, but not its State or Allow* fields, which always read: a
    partition closed or restricted since was still priced for everyone, for as long as a count of
    its record did not read."""
    first = SitePartitions.read(f"{BATCH}\n{GPU}")
    restricted = GPU.replace("State=UP", "State=UP AllowGroups=admins").replace(
        "TotalCPUs=64", "TotalCPUs=many"
    )
    later = SitePartitions.read(f"{BATCH}\n{restricted}", last=first)
    assert later.shapes["gpu"].cpus == 64 and later.shapes["gpu"].access.allow_groups == frozenset({"admins"})
    ann = advice(later)
    assert priced(ann) == {"batch", "gpu"}  # groups unknown: not held against her, as always
    stale = "partition gpu: sizes and limits of an earlier reading (its description does not read)"
    assert stale in ann.notes
    down = GPU.replace("State=UP", "State=DOWN").replace("TotalCPUs=64", "TotalCPUs=many")
    closed = SitePartitions.read(f"{BATCH}\n{down}", last=later)
    shut = advice(closed)
    assert priced(shut) == {"batch"} and "partitions left out: gpu (State=DOWN)" in shut.notes


def test_a_hidden_partition_that_does_not_read_is_named_only_to_who_names_it() -> None:
    hidden = GPU.replace("State=UP", "State=UP Hidden=YES TotalCPUs=many").replace("TotalCPUs=64 ", "")
    site = SitePartitions.read(f"{BATCH}\n{hidden}")
    assert not any("gpu" in n for n in advice(site).notes)  # before: named to every user
    said = "not compared, scontrol's description of it does not read: gpu"
    assert said in advice(site, "gpu").notes and said in advice(site, own="gpu").notes


def test_when_the_partitions_that_read_are_hidden_the_note_says_the_others_are() -> None:
    """Before: "every partition here is hidden", beside a note that another one does not read."""
    hidden_batch = BATCH.replace("State=UP", "State=UP Hidden=YES")
    site = SitePartitions.read(f"{hidden_batch}\n{GPU.replace('TotalCPUs=64', 'TotalCPUs=many')}")
    notes = advice(site).notes
    assert "not compared, scontrol's description of it does not read: gpu" in notes
    assert "the other partitions here are hidden: name one (-p, --partition) to compare" in notes
    assert not any(n.startswith("every partition here is hidden") for n in notes)
    only_hidden = advice(SitePartitions.read(hidden_batch)).notes
    assert "every partition here is hidden: name one (-p, --partition) to compare" in only_hidden
