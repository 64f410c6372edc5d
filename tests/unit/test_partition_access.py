"""Only partitions that take jobs and admit the caller are priced: State, AllowGroups,
AllowAccounts, DenyAccounts, AllowQos and DenyQos as ``scontrol show partition`` prints them.

Faked at two boundaries: scontrol's text and the caller's groups."""

from __future__ import annotations

import grp
import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.advice.partition_access import PartitionAccess
from slurm_harp.advice.partition_shape import shapes_from_scontrol
from slurm_harp.advice.partition_table import from_scontrol
from slurm_harp.advice.quote import cheapest_limit
from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.tariff import Prices, Tariff
from slurm_harp.config import parse
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.server.advisor import PARTITIONS_ARGV, Advisor, SlurmPartitions, user_groups

COMMON = "MaxNodes=UNLIMITED MaxTime=1-00:00:00 TotalCPUs=128 TotalNodes=4 TRES=cpu=128,mem=512000M,node=4"
# owners is cheaper but only for chemlab's group and the chem account; retired takes no jobs.
SCONTROL = (
    f"PartitionName=batch AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL State=UP {COMMON} "
    "TRESBillingWeights=CPU=1.0\n"
    f"PartitionName=owners AllowGroups=chemlab AllowAccounts=chem AllowQos=ALL State=UP {COMMON} "
    "TRESBillingWeights=CPU=0.5\n"
    f"PartitionName=retired AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL State=INACTIVE {COMMON} "
    "TRESBillingWeights=CPU=0.25\n"
)
IDS = itertools.count(1)


def record(cpus: int, minutes: float) -> JobRecord:
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=cpus, partition="batch")
    return JobRecord(
        job_id=str(next(IDS)), request=job, state="COMPLETED", elapsed_s=round(minutes * 60), alloc_cpus=cpus
    )


RUNS = [record(4, 80), record(4, 88), record(16, 24), record(16, 26)]


def advice_for(groups: frozenset[str] | None, **job: str) -> Advice:
    ask = Ask(JobRequest(user_name="ann", job_name="sim", min_cpus=4, partition="batch", **job))  # type: ignore[arg-type]
    tariff = Tariff.of(Prices(), from_scontrol(SCONTROL))
    return advise(ask, RUNS, tariff, shapes_from_scontrol(SCONTROL), groups=groups)


def priced(advice: Advice) -> set[str]:
    return {o.partition for o in advice.options}


def test_only_partitions_that_admit_the_caller_and_take_jobs_are_priced() -> None:
    ann = advice_for(frozenset({"ann", "physics"}), account="phys")
    assert priced(ann) == {"batch"} and ann.cheapest is not None and ann.cheapest.partition == "batch"
    assert "partitions left out: owners (AllowGroups), retired (State=INACTIVE)" in ann.notes
    # A member of chemlab charging chem gets owners, the cheaper one.
    chemist = advice_for(frozenset({"ann", "chemlab"}), account="chem")
    assert priced(chemist) == {"batch", "owners"} and chemist.cheapest is not None
    assert chemist.cheapest.partition == "owners"
    assert "partitions left out: retired (State=INACTIVE)" in chemist.notes
    assert (
        "partitions left out: owners (AllowAccounts), retired (State=INACTIVE)"
        in advice_for(frozenset({"chemlab"}), account="phys").notes
    )


def test_what_cannot_be_checked_is_not_held_against_the_caller() -> None:
    # No groups known and no account given: owners stays; a partition that takes no jobs never does.
    unknown = advice_for(None)
    assert priced(unknown) == {"batch", "owners"}
    assert "partitions left out: retired (State=INACTIVE)" in unknown.notes
    assert priced(advice_for(None, account="phys")) == {"batch"}  # the account alone rules owners out
    # Named by the user, a partition that takes no jobs is still left out.
    ask = Ask(JobRequest(user_name="ann", job_name="sim", min_cpus=4), partitions=("retired",))
    named = advise(ask, RUNS, Tariff.of(Prices(), from_scontrol(SCONTROL)), shapes_from_scontrol(SCONTROL))
    assert named.options == () and "partitions left out: retired (State=INACTIVE)" in named.notes


def test_deny_lists_qos_and_case_as_slurm_reads_them() -> None:
    access = PartitionAccess.of(
        {"State": "UP", "AllowGroups": "ALL", "DenyAccounts": "guests,Students", "DenyQos": "scavenger"}
    )
    assert (
        access.refusal(frozenset({"x"}), "STUDENTS", None) == "DenyAccounts"
    )  # accounts: lower case in Slurm
    assert access.refusal(None, "phys", "scavenger") == "DenyQos"
    assert access.refusal(None, "phys", "normal") is None and access.refusal(None, None, None) is None
    qos = PartitionAccess.of({"AllowQos": "high,normal"})
    assert qos.refusal(None, None, "low") == "AllowQos" and qos.refusal(None, None, "Normal") is None
    for state in ("DOWN", "DRAIN", "INACTIVE"):
        assert PartitionAccess.of({"State": state}).refusal(None, None, None) == f"State={state}"
    assert PartitionAccess.of({}).refusal(None, None, None) is None  # nothing said: as before


def test_root_only_and_reservation_only_partitions_are_left_out() -> None:
    # RootOnly=YES takes jobs from root alone, ReqResv=YES only jobs in a reservation (an ask names
    # none): both were priced for anyone, and the cheaper was named the cheapest.
    scontrol = (
        SCONTROL
        + f"PartitionName=admin RootOnly=YES ReqResv=NO State=UP {COMMON} TRESBillingWeights=CPU=0.1\n"
        + f"PartitionName=resv RootOnly=NO ReqResv=YES State=UP {COMMON} TRESBillingWeights=CPU=0.2\n"
    )
    tariff, shapes = Tariff.of(Prices(), from_scontrol(scontrol)), shapes_from_scontrol(scontrol)
    for uid in (1000, None):
        job = JobRequest(user_name="ann", user_id=uid, job_name="sim", min_cpus=4)
        ann = advise(Ask(job), RUNS, tariff, shapes, groups=frozenset({"ann"}))
        assert priced(ann) == {"batch"} and ann.cheapest is not None and ann.cheapest.partition == "batch"
        assert (
            "partitions left out: admin (RootOnly), owners (AllowGroups), resv (ReqResv) and 1 more"
            in ann.notes
        )
    root = advise(
        Ask(JobRequest(user_name="root", user_id=0, job_name="sim", min_cpus=4)), [], tariff, shapes
    )
    assert "admin" in priced(root) and "resv" not in priced(root)
    assert PartitionAccess.of({"RootOnly": "NO", "ReqResv": "NO"}).refusal(None, None, None) is None


def test_the_advisor_asks_with_the_callers_groups(tmp_path: Path) -> None:
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge(RUNS, "sacct")

    def runner(argv: Sequence[str]) -> str:
        return SCONTROL if tuple(argv) == PARTITIONS_ARGV else ""

    groups = {1000: frozenset({"ann"}), 1001: frozenset({"ann", "chemlab"})}
    advisor = Advisor(
        parse({"history": {"db": str(tmp_path / "jobs.sqlite")}}),
        SlurmPartitions(runner),
        name_of=lambda uid: "ann",
        groups_of=groups.__getitem__,
    )
    ask = Ask(JobRequest(job_name="sim", min_cpus=4))
    assert priced(advisor.advise(1000, ask)) == {"batch"}
    assert priced(advisor.advise(1001, ask)) == {"batch", "owners"}


def test_a_users_groups_are_their_primary_and_other_groups() -> None:
    uid = os.getuid()
    mine = user_groups(uid)
    assert mine is not None and grp.getgrgid(os.getgid()).gr_name in mine
    assert user_groups(54321) is None  # no such user here: unknown, not "no groups"


def test_a_partition_with_maxtime_0_is_left_out_and_the_others_are_answered() -> None:
    # MaxTime=0: no job can run there. It was dropped as "no limit" from the cap but kept by the
    # quote, which raised "limit 88 min is above the cap 0 min": every unscoped advice failed.
    closed = SCONTROL + f"PartitionName=closed State=UP {COMMON.replace('MaxTime=1-00:00:00', 'MaxTime=0')}\n"
    ask = Ask(JobRequest(user_name="ann", job_name="sim", min_cpus=4))
    advice = advise(ask, RUNS, Tariff.of(Prices(), from_scontrol(closed)), shapes_from_scontrol(closed))
    assert priced(advice) == {"batch", "owners"} and advice.cheapest is not None
    assert "partitions left out: closed (MaxTime=0), retired (State=INACTIVE)" in advice.notes
    # Known to the tariff alone (no shape): not priced, with the same word.
    alone = advise(ask, RUNS, Tariff.of(Prices(), from_scontrol(closed)), {})
    shut = [o for o in alone.options if o.partition == "closed"]
    assert shut and all(not o.priced and o.note == "closed (MaxTime=0)" for o in shut)
    assert alone.cheapest is not None and alone.cheapest.partition != "closed"


def test_a_partition_whose_pricing_fails_is_noted_and_the_others_are_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing(tariff: Tariff, partition: str, *rest: Any) -> Any:
        if partition == "owners":
            raise ValueError("a bad bound")
        return cheapest_limit(tariff, partition, *rest)

    monkeypatch.setattr("slurm_harp.advice.option.cheapest_limit", failing)
    advice = advice_for(None)
    assert priced(advice) == {"batch"} and advice.cheapest is not None
    assert "partition owners: not priced (a bad bound)" in advice.notes


def _advisor(tmp_path: Path, runner: Any, settings: Any, groups: dict[int, frozenset[str]]) -> Advisor:
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge(RUNS, "sacct")
    return Advisor(settings, SlurmPartitions(runner), name_of=lambda uid: "ann", groups_of=groups.__getitem__)


def test_scontrol_is_read_with_all_so_restricted_partitions_reach_the_advice(tmp_path: Path) -> None:
    """For a user who is not an operator (the daemon's slurm-harp, unless made one), slurmctld leaves
    out of `scontrol show partition` the partitions whose AllowGroups leave that user out, unless asked
    `--all`: owners never reached the advice, and chemlab's members were told "no such partition
    here: owners"."""
    asked: list[tuple[str, ...]] = []

    def slurmctld(argv: Sequence[str]) -> str:
        asked.append(tuple(argv))
        if tuple(argv) != PARTITIONS_ARGV:
            return ""
        visible = SCONTROL.splitlines(keepends=True)
        return SCONTROL if "--all" in argv else "".join(p for p in visible if "chemlab" not in p)

    settings = parse({"history": {"db": str(tmp_path / "jobs.sqlite")}})
    advisor = _advisor(tmp_path, slurmctld, settings, {1001: frozenset({"ann", "chemlab"})})
    ask = Ask(JobRequest(job_name="sim", min_cpus=4, partition="owners", account="chem"))
    chemist = advisor.advise(1001, ask)
    assert asked[0][:2] == ("scontrol", "--all") and asked[0][-2:] == ("show", "partition")
    assert priced(chemist) == {"batch", "owners"} and chemist.options[0].partition == "owners"
    assert not any("no such partition" in n for n in chemist.notes)


def test_a_partition_harp_toml_alone_names_is_not_priced_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A `[[billing.partition]]` scontrol does not list (`GPU` for `gpu`, a partition since removed) was
    a partition of the site through the tariff alone: priced for anyone, without State or Allow*
    checks, with a 366-day cap, and named the cheapest."""

    def runner(argv: Sequence[str]) -> str:
        return SCONTROL if tuple(argv) == PARTITIONS_ARGV else ""

    toml = {
        "history": {"db": str(tmp_path / "jobs.sqlite")},
        "billing": {"partition": [{"name": "BATCH", "price": 0.01}]},
        "advice": {"partition": [{"name": "gpus", "gpu_memory_gb": 80}]},
    }
    current = [parse(toml)]
    advisor = _advisor(tmp_path, runner, lambda: current[0], {1000: frozenset({"ann"})})
    caplog.set_level("WARNING", logger="slurm_harp.server.advisor")
    for _ in range(3):
        ann = advisor.advise(1000, Ask(JobRequest(job_name="sim", min_cpus=4)))
        assert priced(ann) == {"batch"} and ann.cheapest is not None and ann.cheapest.partition == "batch"
        assert "[billing] prices partitions scontrol does not list; not priced: BATCH" in ann.notes
    named = advisor.advise(1000, Ask(JobRequest(job_name="sim", min_cpus=4, partition="BATCH")))
    assert priced(named) == {"batch"} and "no such partition here: BATCH" in named.notes
    warned = [r.getMessage() for r in caplog.records]
    # An [[advice.partition]] entry holds a GPU's memory, not a price: its name, unlisted, is said so.
    assert warned == [
        "advice: harp.toml names partitions scontrol does not list (a typo? gone?): "
        "not priced ([[billing.partition]]): 'BATCH'; GPU memory not used ([[advice.partition]]): 'gpus'"
    ]
    current[0] = parse({**toml, "advice": {}})  # a reload that changes them is said again
    advisor.advise(1000, Ask(JobRequest(job_name="sim")))
    assert len(caplog.records) == 2
    assert caplog.records[1].getMessage().endswith("gone?): not priced ([[billing.partition]]): 'BATCH'")
    # scontrol unread (no partition known): [billing]'s names are the site's, as before.
    unread = advise(Ask(JobRequest(user_name="ann", job_name="sim", min_cpus=4)), RUNS,
                    Tariff.of(current[0].billing), {})  # fmt: skip
    assert priced(unread) == {"BATCH"}


def test_a_hidden_partition_is_priced_only_for_an_ask_that_names_it() -> None:
    """Hidden=YES, which `--all` now brings: the site keeps it out of listings but runs jobs that name
    it. Offered unasked, it would be named the cheapest to every user; named, it is priced."""
    scontrol = SCONTROL + (
        f"PartitionName=debug Hidden=YES AllowGroups=ALL State=UP {COMMON} TRESBillingWeights=CPU=0.1\n"
        f"PartitionName=staff Hidden=YES AllowGroups=staff State=UP {COMMON} TRESBillingWeights=CPU=0.1\n"
    )
    tariff, shapes = Tariff.of(Prices(), from_scontrol(scontrol)), shapes_from_scontrol(scontrol)
    ann = frozenset({"ann"})

    def ask(partition: str | None = None, *named: str) -> Advice:
        job = JobRequest(user_name="ann", job_name="sim", min_cpus=4, partition=partition)
        return advise(Ask(job, partitions=named), RUNS, tariff, shapes, groups=ann)

    unasked = ask()
    assert priced(unasked) == {"batch"} and not any("debug" in n or "staff" in n for n in unasked.notes)
    own = ask("debug")
    assert own.options[0].partition == "debug" and priced(own) == {"batch", "debug"}
    assert own.cheapest is not None and own.cheapest.partition == "debug"
    assert priced(ask(None, "debug", "batch")) == {"batch", "debug"}
    refused = ask("staff")  # named, and still not the caller's
    assert priced(refused) == {"batch"}
    left = "partitions left out: staff (AllowGroups), owners (AllowGroups), retired (State=INACTIVE)"
    assert left in refused.notes


def test_a_site_whose_every_partition_is_hidden_says_so_not_that_scontrol_failed() -> None:
    """scontrol was read and lists only Hidden partitions: an ask that names none had the note that
    scontrol could not be read, which sent the user to the wrong cause."""
    scontrol = f"PartitionName=batch Hidden=YES AllowGroups=ALL State=UP {COMMON}\n"
    tariff, shapes = Tariff.of(Prices(), from_scontrol(scontrol)), shapes_from_scontrol(scontrol)
    job = JobRequest(user_name="ann", job_name="sim", min_cpus=4)
    unnamed = advise(Ask(job), RUNS, tariff, shapes, groups=frozenset({"ann"}))
    assert not unnamed.options
    assert "every partition here is hidden: name one (-p, --partition) to compare" in unnamed.notes
    assert not any("could not be read" in n for n in unnamed.notes)
    named = advise(Ask(job, partitions=("batch",)), RUNS, tariff, shapes, groups=frozenset({"ann"}))
    assert priced(named) == {"batch"} and not any("hidden" in n for n in named.notes)
