"""An account or QOS typed in capitals (`sbatch -A Phys --qos=High`). slurmctld runs the job_submit
plugins first and lowers the account only afterwards (job_mgr.c, validate_job_create_req, 22.05), and
a job's QOS is the one sacctmgr created in lower case, matched in any case: accounting and the job
store hold "phys" and "high" while the plugin sends what was typed (core.text.LOWERED_FIELDS)."""

from __future__ import annotations

from dataclasses import replace

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.config import parse
from slurm_harp.core import text
from slurm_harp.core.features import REQUEST_FEATURE_NAMES, row
from slurm_harp.core.history import HISTORY_FEATURE_NAMES, HistoryIndex
from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Mode
from slurm_harp.core.request import JobRequest
from slurm_harp.core.text import MAX_TEXT_BYTES
from slurm_harp.server.convert import request_from_proto

T0 = 1_700_006_400
ACCOUNT_JOBS = HISTORY_FEATURE_NAMES.index("h30d_account_log_jobs")
HASHES = [REQUEST_FEATURE_NAMES.index(f"hash_{field}") for field in ("account", "qos")]


def typed(account: str, qos: str | None = None) -> JobRequest:
    """The request the daemon makes of what the plugin sends for ``-A account --qos qos``."""
    sent = pb.SubmitRequest(user_name="alice", account=account, qos=qos, time_limit_minutes=60)
    return request_from_proto(sent)


def test_an_account_and_a_qos_are_kept_as_accounting_keeps_them() -> None:
    request = typed("Phys", "High")
    assert (request.account, request.qos) == ("phys", "high")
    assert JobRequest(account="PHYS-Lab_2", qos="Normal").account == "phys-lab_2"
    # Only A-Z, as slurmctld's tolower in the C locale: the bytes stay as many and the cut holds.
    assert text.lowered("Équipe-İ-Straße-A") == "Équipe-İ-straße-a"
    long = JobRequest(account="É" * MAX_TEXT_BYTES).account
    assert long is not None and len(long.encode()) <= MAX_TEXT_BYTES and long == "É" * (MAX_TEXT_BYTES // 2)
    # The other strings are case-sensitive in Slurm.
    kept = {"user_name": "Alice", "partition": "GPU", "job_name": "Relax", "work_dir": "/Home"}
    other = JobRequest(**kept)  # type: ignore[arg-type]
    assert {field: getattr(other, field) for field in kept} == kept


def test_an_account_typed_in_capitals_keys_the_accounts_history_and_hash() -> None:
    index = HistoryIndex()
    for i in range(5):
        submit = T0 + i * 3600
        harvested = JobRequest(user_name="bob", account="phys", qos="high", submit_time=submit)
        record = JobRecord(str(i), harvested, state="COMPLETED", elapsed_s=600, end_time=submit + 600)
        index.add(record)
    served = replace(typed("Phys", "HIGH"), submit_time=T0 + 10 * 3600)
    assert index.row(served, T0 + 10 * 3600)[ACCOUNT_JOBS] > 0
    as_stored = replace(served, account="phys", qos="high")
    assert [row(served)[i] for i in HASHES] == [row(as_stored)[i] for i in HASHES]


def test_an_opted_out_account_is_left_alone_whatever_its_case() -> None:
    """The safety case: a job of an opted-out account was changed when its user typed capitals."""
    policy = parse({"policy": {"opt_out_accounts": ["Critical", "lab"]}}).policy
    for account in ("critical", "Critical", "CRITICAL", "Lab"):
        assert policy.opted_out(typed(account)), account
    assert not policy.opted_out(typed("other"))


def test_a_rule_matches_an_account_whatever_its_case() -> None:
    rules = [{"account": "Phys", "mode": "off"}, {"account": "chem", "mode": "rewrite"}]
    policy = parse({"policy": {"mode": "shadow", "rule": rules}}).policy
    assert policy.rules[0].account == "phys"
    expected = {"phys": Mode.OFF, "PHYS": Mode.OFF, "Chem": Mode.REWRITE, "bio": Mode.SHADOW}
    for account, mode in expected.items():
        assert policy.mode_for(typed(account)) is mode, account
