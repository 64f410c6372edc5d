"""The account slurmctld gives a job that names none: its user's default account, as slurmctld's
association manager holds it (``scontrol --oneliner show assoc_mgr flags=users``, one line a user:
``UserName=ann(1000) DefAccount=chem DefWckey= AdminLevel=None``).

A partition's ``AllowAccounts`` and ``DenyAccounts`` admit a job by that account, so the advice checks
a job without ``--account`` against it, as slurmctld will. A user with no line (no association, or a
daemon that is not an operator where ``PrivateData=users`` shows it only its own) has none known: the
job is then not held to the accounts, as before. Names are compared as accounting keeps them
(core.text.lowered); the uid first, since a user's name on this host is what the kernel's uid gives.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.core.text import lowered

__all__ = ["DefaultAccounts"]

# slurmctld prints the uid it resolved, or NO_VAL for a name it could not (found by name alone).
_NO_UID = 4294967294
_USER = re.compile(r"^UserName=(?P<name>[^\s(]+)\((?P<uid>\d+)\)\s+DefAccount=(?P<account>\S*)", re.M)


@dataclass(frozen=True, slots=True)
class DefaultAccounts:
    by_uid: Mapping[int, str] = field(default_factory=dict)
    by_name: Mapping[str, str] = field(default_factory=dict)  # lowered

    @classmethod
    def read(cls, text: str) -> DefaultAccounts:
        """The users of scontrol's text with a default account (an empty DefAccount: none)."""
        by_uid, by_name = {}, {}
        for found in _USER.finditer(text):
            account = found["account"]
            if account:
                if int(found["uid"]) != _NO_UID:
                    by_uid[int(found["uid"])] = account
                by_name[lowered(found["name"])] = account
        return cls(by_uid, by_name)

    def of(self, uid: int | None, name: str | None) -> str | None:
        """The default account of the user ``uid`` (else named ``name``); None: not known."""
        if uid is not None and uid in self.by_uid:
            return self.by_uid[uid]
        return self.by_name.get(lowered(name)) if name is not None else None
