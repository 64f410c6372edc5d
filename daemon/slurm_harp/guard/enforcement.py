"""Whether slurmctld enforces QOS and association limits (slurm.conf's AccountingStorageEnforce), and
so whether a QOS's or an association's MaxWall bounds the guard's extensions (guard.bounds).

Slurm 22.05 checks either MaxWall only where AccountingStorageEnforce sets ACCOUNTING_ENFORCE_LIMITS
(job_mgr.c _job_create before acct_policy_validate; acct_policy.c
acct_policy_job_runnable_pre_select). read_config.c (_validate_accounting_storage_enforce) sets it for
``limits`` (or ``2``), ``safe`` and ``all``, words in any case; ``associations`` (``1``), ``qos``,
``wckeys``, ``nojobs`` and ``nosteps`` do not. Where it is not set, a job runs to its own limit past
any MaxWall: a guard bounding an extension at one would stop a job harp cut before the limit its user
asked for, which no Slurm limit would have done.

Read from ``scontrol show config`` (slurmctld's running setting, printed as its words:
``associations,limits``, ``none``) with the other bounds, once a minute (guard.survey), in the read
made after the poll's listing that slurmctld's start shares (guard.slurm.ConfigAfterListing): a
slurmctld restarted with another setting is seen within a minute. A word not known here (a later Slurm's) sets
nothing, logged as it is first read.

Not read (scontrol failing, no such line): the last read is kept; a guard that has read none applies
neither MaxWall, logged as an error at each read. Of the two ways to be wrong, that one lets a job cut
below a MaxWall Slurm enforces run past it, up to its user's own limit and no further, as a guard
that could not read the QOS does; the other stops jobs before their users' limits, which the guard
exists to prevent.
"""

from __future__ import annotations

import logging

from slurm_harp.guard.slurm import ConfigAfterListing
from slurm_harp.slurm_formats import config_value

log = logging.getLogger(__name__)

KEY = "AccountingStorageEnforce"
# read_config.c's words that set ACCOUNTING_ENFORCE_LIMITS, and those that do not ("none": what
# scontrol prints for no word).
_LIMITS = frozenset({"limits", "2", "safe", "all"})
_OTHERS = frozenset({"associations", "1", "qos", "wckeys", "nojobs", "nosteps", "none"})


def enforce_words(text: str) -> frozenset[str]:
    """The words of ``scontrol show config``'s AccountingStorageEnforce, lowered; ValueError when
    the text has no such line."""
    value = config_value(text, KEY)
    if value is None:
        raise ValueError(f"no {KEY} line")
    return frozenset(w.strip().lower() for w in value.split(",")) - {""}


def sets_limits(words: frozenset[str]) -> bool:
    return bool(words & _LIMITS)


class Enforcement:
    """The last AccountingStorageEnforce read: whether QOS and association MaxWall bound a job."""

    def __init__(self, config: ConfigAfterListing) -> None:
        self._config = config
        self._words: frozenset[str] | None = None  # None: not read since the guard started

    @property
    def known(self) -> bool:
        """Whether the setting was read since the guard started."""
        return self._words is not None

    def read(self) -> bool:
        """Read it again: whether limits are enforced; the last read, or False (neither MaxWall a
        bound) where none read, when it does not read (logged)."""
        done = self._config.read()
        try:
            if done.returncode != 0:
                raise ValueError(f"exit {done.returncode}: {done.stderr.strip():.200}")
            words = enforce_words(done.stdout)
        except ValueError as exc:
            if self._words is None:
                kept = "no QOS or association MaxWall bounds an extension until it reads"
            else:
                kept = f"the last read kept ({','.join(sorted(self._words)) or 'none'})"
            log.error("slurmctld's %s does not read (%s): %s", KEY, exc, kept)
            return self._words is not None and sets_limits(self._words)
        if words != self._words:
            if unknown := words - _LIMITS - _OTHERS:
                log.warning(
                    "%s: %s not known here, taken to enforce nothing", KEY, ", ".join(sorted(unknown))
                )
            shown = ",".join(sorted(words)) or "none"
            if sets_limits(words):
                log.info(
                    "slurmctld enforces limits (%s=%s): QOS and association MaxWall bound extensions",
                    KEY,
                    shown,
                )
            else:
                log.info(
                    "slurmctld enforces no limits (%s=%s): QOS and association MaxWall bound no "
                    "extension, as Slurm stops no job at them", KEY, shown,
                )  # fmt: skip
        self._words = words
        return sets_limits(words)
