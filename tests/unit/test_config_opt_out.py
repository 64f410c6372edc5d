"""`policy.opt_out_users` and `policy.opt_out_accounts`: each entry one name, as a job's is matched
(config/reader.py Reader.names), as a [[policy.rule]]'s partition or account is."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from slurm_harp.config import parse
from slurm_harp.core.policy import Mode
from slurm_harp.core.request import JobRequest
from tests.unit.test_config import refused_by_check_config

# Entries check-config said ok to that match no job's user or account: those users' and accounts'
# jobs were then changed, as if the site had not opted them out.
NO_JOB_MATCHES = {
    "opt_out_accounts = ['phys,chem']": (
        "policy.opt_out_accounts[0]: one account per entry: list each on its own: 'phys', 'chem'"
    ),
    "opt_out_users = ['alice', ' bob']": (
        "policy.opt_out_users[1]: must be a user's name without spaces around it, got ' bob'"
    ),
    "opt_out_users = ['bob ']": "policy.opt_out_users[0]: must be a user's name without spaces around it",
    "opt_out_users = ['']": "policy.opt_out_users[0]: must name a user, got ''",
    'opt_out_accounts = ["lab", "x", "\\t"]': "policy.opt_out_accounts[2]: must name an account, got '\\t'",
    "opt_out_users = ['alice,bob']": (
        "policy.opt_out_users[0]: one user per entry: list each on its own: 'alice', 'bob'"
    ),
}


@pytest.mark.parametrize(
    "line", NO_JOB_MATCHES, ids=["comma", "leading", "trailing", "empty", "tab", "users"]
)
def test_an_opt_out_entry_no_job_can_match_is_refused_by_check_config_naming_key_and_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, line: str
) -> None:
    path, message = refused_by_check_config(tmp_path, caplog, f"[policy]\nmode = 'rewrite'\n{line}\n")
    assert message.startswith(f"{path}: {NO_JOB_MATCHES[line]}"), message


def test_opt_out_entries_of_one_name_each_keep_those_jobs_out() -> None:
    """What the refusal tells the site to write instead."""
    text = "[policy]\nmode = 'rewrite'\nopt_out_users = ['bob']\nopt_out_accounts = ['phys', 'Chem']\n"
    policy = parse(tomllib.loads(text)).policy
    assert policy.default_mode is Mode.REWRITE
    for user, account in (("bob", "x"), ("alice", "phys"), ("alice", "chem")):
        assert policy.opted_out(JobRequest(user_name=user, account=account, partition="batch"))
    assert not policy.opted_out(JobRequest(user_name="alice", account="x", partition="batch"))


@pytest.mark.parametrize("value", ["'bob'", "[1]", "[['bob']]"])
def test_an_opt_out_list_that_is_no_list_of_names_is_refused(value: str) -> None:
    from slurm_harp.config import ConfigError

    with pytest.raises(ConfigError, match=r"policy\.opt_out_users: expected a list of names"):
        parse(tomllib.loads(f"[policy]\nopt_out_users = {value}\n"))
