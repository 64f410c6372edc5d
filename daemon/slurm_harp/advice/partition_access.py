"""Whether a partition takes a caller's job, from ``scontrol show partition``'s fields.

The advice prices only partitions a job could run in: ``State`` UP (DOWN queues jobs it does not
run; DRAIN and INACTIVE take none), not ``RootOnly`` (root's jobs alone: any other caller, or one
whose uid is unknown, is refused), not ``ReqResv`` (jobs in a reservation alone: an ask names none),
and the caller admitted by ``AllowGroups`` (any of their
groups), ``AllowAccounts`` / ``DenyAccounts`` (the job's account) and ``AllowQos`` / ``DenyQos``
(its QOS). ``ALL`` means anyone. What the caller does not say cannot be checked and is not held
against them: groups unknown (a caller without a uid), no account (Slurm takes the user's default,
unknown here) or no QOS. Accounts and QOS compare in any case: Slurm keeps their names in lower
case. A field scontrol does not print is no limit.

``Hidden=YES`` keeps no one out (Slurm runs jobs that name such a partition) but the site keeps it
out of listings: it is priced only for an ask that names it (candidates.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

__all__ = ["PartitionAccess"]

ANYONE = "ALL"


@dataclass(frozen=True, slots=True)
class PartitionAccess:
    state: str = "UP"
    root_only: bool = False  # RootOnly=YES: slurmctld takes jobs from root (or SlurmUser) alone
    req_resv: bool = False  # ReqResv=YES: only jobs in a reservation
    hidden: bool = False  # Hidden=YES: left out of listings, not of jobs that name it
    allow_groups: frozenset[str] | None = None  # None: ALL
    allow_accounts: frozenset[str] | None = None  # lower case; None: ALL
    deny_accounts: frozenset[str] = frozenset()
    allow_qos: frozenset[str] | None = None  # lower case; None: ALL
    deny_qos: frozenset[str] = frozenset()

    @classmethod
    def of(cls, block: Mapping[str, str]) -> PartitionAccess:
        """From one partition's ``Key=Value`` fields as scontrol prints them."""
        return cls(
            state=block.get("State", "UP").upper(),
            root_only=block.get("RootOnly", "NO").upper() == "YES",
            req_resv=block.get("ReqResv", "NO").upper() == "YES",
            hidden=block.get("Hidden", "NO").upper() == "YES",
            allow_groups=_names(block.get("AllowGroups"), lower=False),
            allow_accounts=_names(block.get("AllowAccounts")),
            deny_accounts=_names(block.get("DenyAccounts")) or frozenset(),
            allow_qos=_names(block.get("AllowQos")),
            deny_qos=_names(block.get("DenyQos")) or frozenset(),
        )

    def refusal(
        self, groups: Collection[str] | None, account: str | None, qos: str | None, uid: int | None = None
    ) -> str | None:
        """The field that keeps this job out (None: it may run here). ``groups``: the caller's
        group names (None: unknown); ``account``, ``qos``: the job's (None: not given); ``uid``:
        the caller's (None: unknown, and not root: users ask advice)."""
        if self.state != "UP":
            return f"State={self.state}"
        if self.root_only and uid != 0:
            return "RootOnly"
        if self.req_resv:  # an ask carries no reservation
            return "ReqResv"
        if groups is not None and self.allow_groups is not None and not self.allow_groups & set(groups):
            return "AllowGroups"
        if account is not None:
            if self.allow_accounts is not None and account.lower() not in self.allow_accounts:
                return "AllowAccounts"
            if account.lower() in self.deny_accounts:
                return "DenyAccounts"
        if qos is not None:
            if self.allow_qos is not None and qos.lower() not in self.allow_qos:
                return "AllowQos"
            if qos.lower() in self.deny_qos:
                return "DenyQos"
        return None


def _names(text: str | None, lower: bool = True) -> frozenset[str] | None:
    """A comma list (None: not printed, empty, or ALL)."""
    if text is None or text.strip().upper() == ANYONE:
        return None
    names = frozenset((n.lower() if lower else n) for n in (n.strip() for n in text.split(",")) if n)
    return names or None
