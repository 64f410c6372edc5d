"""The association MaxWall that bounds a running job (``sacctmgr modify account A set MaxWall=``, on
an account or on a user's association, inherited down the account tree).

Slurm 22.05 holds a job to its association's MaxWall as it is submitted and before it starts
(acct_policy.c: _acct_policy_validate, acct_policy_job_runnable_pre_select), where it enforces
limits (guard.enforcement), but not when an operator raises its limit (job_mgr.c _update_job
validates only a user's update): a job cut by harp below the MaxWall runs, and the guard would extend
it to its user's own limit past it. So the guard applies it, where Slurm enforces it.

Which association, as slurmctld picks it: the user's on the job's account and partition where
associations are per partition, else the user's on the account. Its MaxWall is the first that one of
them, the account or its parents up to root sets: slurmctld pre-propagates a parent's limit into a
child that sets none (acct_policy.c: "we have pre-propogated them", so parents' per-job limits are
not checked again), and `sacctmgr show assoc` prints the same (checked on 22.05: a MaxWall set on
an account shows in every row below it, ``WOPLimits`` shows only the row's own). The walk up the
tree gives the same answer where a row is missing (a user added since the last read) or printed
without its parents' limits.

Only where neither the job's QOS nor its partition's QOS sets a MaxWall (guard.qos): both checks pass
over an association's MaxWall once a QOS set one (_validate_time_limit returns at once when
qos_rec.max_wall_pj is set; acct_policy_job_runnable_pre_select tests it against INFINITE), larger
or smaller. guard.bounds applies that order.

Names are compared lowered (core.text.lowered): accounting keeps accounts, users (unless slurmdbd's
PreserveCaseUser) and partitions in lower case, squeue prints a user's name as the system has it.
A user with no row listed (added since the last read, or a name squeue could not resolve: "nobody"),
or a row on the way whose MaxWall does not read (logged), gives no bound: the user's own
association may allow more than its account, and a bound too low would stop the job before the
limit Slurm gives it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.core.text import lowered
from slurm_harp.slurm_formats import parse_max_time

log = logging.getLogger(__name__)

# Every cluster's associations (a slurmdbd may keep several): each job is matched on its own
# cluster (squeue's Cluster), so the guard needs no cluster name of its own.
ASSOCIATIONS_ARGV = (
    "sacctmgr", "--noheader", "--parsable2", "show", "assoc",
    "format=Cluster,Account,User,Partition,ParentName,MaxWall",
)  # fmt: skip
_FIELDS = 6

# (cluster, account, user, partition), lowered; an account's own row has no user nor partition.
Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class AssociationTable:
    max_minutes: Mapping[Key, int] = field(default_factory=dict)  # the rows that set a MaxWall
    rows: frozenset[Key] = frozenset()  # every row listed
    unread: frozenset[Key] = frozenset()  # rows whose MaxWall does not read
    parents: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (cluster, account) -> parent

    def max_wall(self, cluster: str, account: str, user: str, partition: str) -> tuple[int, str] | None:
        """(the association MaxWall in minutes that bounds a job of ``user`` on ``account`` in
        ``partition`` of ``cluster``, what sets it); None where none does or the account is not
        listed, the user's association not listed, or a MaxWall on the way does not read. Names in
        any case."""
        cluster, account, user = lowered(cluster), lowered(account), lowered(user)
        partition = lowered(partition)
        own = (cluster, account, user, partition)
        if own not in self.rows:
            own = (cluster, account, user, "")
        if user:
            if own not in self.rows or own in self.unread:
                return None
            if (minutes := self.max_minutes.get(own)) is not None:
                on = f" in partition {partition}" if own[3] else ""
                return minutes, f"association of {user} on account {account}{on} MaxWall"
        seen: set[str] = set()  # a loop in the listing (no tree Slurm keeps) ends the walk
        while account and account not in seen:
            seen.add(account)
            if (cluster, account, "", "") in self.unread:
                return None
            if (minutes := self.max_minutes.get((cluster, account, "", ""))) is not None:
                return minutes, f"account {account} MaxWall"
            account = self.parents.get((cluster, account), "")
        return None


def parse_associations(text: str) -> AssociationTable:
    """ASSOCIATIONS_ARGV's output; a line without its six fields is logged and skipped."""
    limits: dict[Key, int] = {}
    rows: set[Key] = set()
    unread: set[Key] = set()
    parents: dict[tuple[str, str], str] = {}
    for line in text.split("\n"):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != _FIELDS:
            log.warning(
                "association line skipped (%d fields, expected %d): %.200s", len(fields), _FIELDS, line
            )
            continue
        cluster, account, user, partition, parent = (lowered(f.strip()) for f in fields[:5])
        key = (cluster, account, user, partition)
        rows.add(key)
        if not user and parent:
            parents[(cluster, account)] = parent
        try:
            minutes = parse_max_time(fields[5])
        except Exception as exc:  # one odd field, whatever it raises, never stops a poll
            log.warning("association %r MaxWall unreadable, no bound: %s", "/".join(key).strip("/")[:60], exc)
            unread.add(key)
            continue
        if minutes is not None:
            limits[key] = minutes
    return AssociationTable(limits, frozenset(rows), frozenset(unread), parents)


def lists_associations(text: str) -> bool:
    """Whether the output lists an association: every cluster has its root's, so none listed is no
    listing of the site (guard.survey keeps the last read)."""
    return any(len(f := line.split("|")) == _FIELDS and f[1].strip() for line in text.split("\n"))
