"""`harp advise` checks a job that names no account against the partitions' AllowAccounts and
DenyAccounts with the account slurmctld gives it, its user's default (root's is `research` here).
On a real cluster such a job in a partition of `teaching` alone, or in one that denies `research`,
is accepted with the account `research` and pends for good ("Job's account not permitted to use
this partition", EnforcePartLimits=NO, associations enforced or not); the advice leaves both out,
saying why. With `-A teaching` slurmctld and the advice take both. Before, a job naming no account
was held to none: the advice priced both, for a job that would never start there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.advice_site import advising, held_record, open_site, scripts
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.cluster_config import DEFAULT_ACCOUNT

pytestmark = pytest.mark.e2e

PARTITIONS = (
    "PartitionName=teachers Nodes=ALL MaxTime=INFINITE State=UP AllowAccounts=teaching\n"
    "PartitionName=others Nodes=ALL MaxTime=INFINITE State=UP DenyAccounts=research\n"
)


def held_job(cluster: SlurmCluster, partition: str, account: str | None) -> dict[str, str]:
    """What slurmctld holds of a held job submitted to ``partition`` (with ``-A account``)."""
    argv = ["sbatch", "--parsable", "--hold", "-p", partition, "-t", "5", "-o", "/dev/null"]
    return held_record(cluster, cluster.run([*argv, *(["-A", account] if account else []), "--wrap", "true"]))


@pytest.fixture
def site(start_cluster: StartCluster) -> Iterator[tuple[SlurmCluster, Path]]:
    yield from open_site(start_cluster, nodes=1, slurm_conf_extra=PARTITIONS)


def test_a_job_naming_no_account_is_admitted_by_its_default_account(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    assert DEFAULT_ACCOUNT == "research"
    for partition in ("teachers", "others"):
        for account, runs in ((None, False), ("teaching", True)):
            held = held_job(cluster, partition, account)
            assert held["Account"] == (account or DEFAULT_ACCOUNT), held
            assert held["Reason"].startswith("Job's_account_not_permitted") is not runs, held
    written = scripts(work, "account", {"default": "-n 1", "teaching": "-n 1 -A teaching"})
    with advising(cluster, work) as advise:
        answers = {name: advise("--script", str(path)) for name, path in written.items()}
    priced = {name: {o["partition"] for o in answer["options"]} for name, answer in answers.items()}
    assert priced["default"] == {"batch", "debug"}, answers["default"]
    notes = answers["default"]["notes"]
    assert "partitions left out: others (DenyAccounts), teachers (AllowAccounts)" in notes, notes
    assert "without --account your job is given your default account, research" in notes
    assert priced["teaching"] == {"batch", "debug", "others", "teachers"}, answers["teaching"]
    assert not any("default account" in n for n in answers["teaching"].get("notes", []))
