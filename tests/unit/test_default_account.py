"""advice.default_account and the advisor: a job naming no account is checked against the
partitions' AllowAccounts and DenyAccounts with the account slurmctld gives it, its user's default
(`scontrol show assoc_mgr flags=users`). Before, such a job was held to no account: the advice
priced a partition whose AllowAccounts slurmctld refuses the job in."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.advice.default_account import DefaultAccounts
from slurm_harp.advice.recommend import Ask
from slurm_harp.config import parse
from slurm_harp.core.request import JobRequest
from slurm_harp.server.advisor import PARTITIONS_ARGV, USERS_ARGV, Advisor, SlurmPartitions
from tests.unit.test_partition_access import RUNS, SCONTROL, priced

# As slurmctld 22.05 prints it (checked on the test cluster: UserName=root(0) DefAccount=research ...).
USERS = (
    "Current Association Manager state\nUser Records\n"
    "UserName=ann(1000) DefAccount=phys DefWckey= AdminLevel=None\n"
    "UserName=cara(1002) DefAccount=chem DefWckey= AdminLevel=None\n"
    "UserName=Dan(4294967294) DefAccount=chem DefWckey= AdminLevel=None\n"
    "UserName=eve(1004) DefAccount= DefWckey= AdminLevel=None\n"
)
NAMES = {1000: "ann", 1002: "cara", 1003: "dan", 1004: "eve", 1005: "fay"}


def test_each_user_s_default_account_is_read() -> None:
    accounts = DefaultAccounts.read(USERS)
    assert accounts.of(1000, "ann") == "phys" and accounts.of(1002, "cara") == "chem"
    # A name slurmctld found no uid for (NO_VAL) is known by name alone, as accounting keeps it.
    assert (
        accounts.of(1003, "dan") == accounts.of(None, "DAN") == "chem" and 4294967294 not in accounts.by_uid
    )
    assert accounts.of(1004, "eve") is None and accounts.of(1005, "fay") is None  # none: not known
    assert DefaultAccounts.read("garbage\nUserName=x DefAccount=y\n") == DefaultAccounts()


def _advisor(tmp_path: Path, users: list[str | None]) -> Advisor:
    with JobStore(tmp_path / "jobs.sqlite") as store:
        store.merge(RUNS, "sacct")

    def slurmctld(argv: Sequence[str]) -> str:
        if tuple(argv) == USERS_ARGV:
            if users[0] is None:
                raise RuntimeError("scontrol show assoc_mgr exited 1: Access denied")
            return users[0]
        return SCONTROL if tuple(argv) == PARTITIONS_ARGV else ""

    now = [0.0]
    partitions = SlurmPartitions(slurmctld, refresh_seconds=0, clock=lambda: now[0])
    settings = parse({"history": {"db": str(tmp_path / "jobs.sqlite")}})
    # Everyone in chemlab: owners (AllowGroups=chemlab AllowAccounts=chem) admits them by account alone.
    return Advisor(
        settings, partitions, name_of=NAMES.__getitem__, groups_of=lambda uid: frozenset({"chemlab"})
    )


NOTE = "without --account your job is given your default account"


def test_a_job_naming_no_account_is_admitted_by_its_user_s_default(tmp_path: Path) -> None:
    advisor = _advisor(tmp_path, [USERS])
    ask = Ask(JobRequest(job_name="sim", min_cpus=4))
    ann = advisor.advise(1000, ask)  # default phys: owners takes chem's jobs alone
    assert (
        priced(ann) == {"batch"}
        and "partitions left out: owners (AllowAccounts), retired (State=INACTIVE)" in ann.notes
    )
    assert f"{NOTE}, phys" in ann.notes
    # Asked of batch alone, which takes every account: nothing to say about the default.
    only = advisor.advise(1000, Ask(JobRequest(job_name="sim", min_cpus=4), partitions=("batch",)))
    assert priced(only) == {"batch"} and not any(NOTE in n for n in only.notes)
    cara = advisor.advise(1002, ask)
    assert priced(cara) == {"batch", "owners"} and f"{NOTE}, chem" not in cara.notes  # it kept nothing out
    # The job's own account is the one: the default is not looked at.
    named = advisor.advise(1000, Ask(JobRequest(job_name="sim", min_cpus=4, account="chem")))
    assert priced(named) == {"batch", "owners"} and not any(NOTE in n for n in named.notes)
    # No default known: not held to the accounts, as before.
    assert priced(advisor.advise(1004, ask)) == {"batch", "owners"}


def test_default_accounts_that_do_not_read_keep_the_last_reading_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users: list[str | None] = [None]
    advisor = _advisor(tmp_path, users)
    ask = Ask(JobRequest(job_name="sim", min_cpus=4))
    with caplog.at_level("INFO", logger="slurm_harp.server.advisor"):
        assert priced(advisor.advise(1000, ask)) == {"batch", "owners"}  # none read yet: not held
        assert priced(advisor.advise(1000, ask)) == {"batch", "owners"}
        users[0] = USERS
        assert priced(advisor.advise(1000, ask)) == {"batch"}
        users[0] = None
        assert priced(advisor.advise(1000, ask)) == {"batch"}  # the last reading stays
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "advice: cannot read the users' default accounts: scontrol show assoc_mgr exited 1: Access denied",
        "advice: the users' default accounts read again",
        "advice: cannot read the users' default accounts: scontrol show assoc_mgr exited 1: Access denied",
    ]
