"""The advice service's core, without gRPC: who asks, their own runs, the site's partitions and
prices, then advice.recommend.

The caller is a uid the kernel gave (server/peer_relay.py), resolved to a user name on this host.
Whatever user the request names is replaced by that one before anything is read, and the job
store is queried for that user's rows alone (JobStore.runs_of); recommend drops any other user's
run again. Partitions (sizes, MaxTime, billing weights, whom they take jobs from) come from
``scontrol --all``, with the account a job naming none is given (its user's default), read at most
every few minutes; prices from harp.toml's ``[billing]``. The caller's
groups (for AllowGroups) are read on this host, as the user name is.
"""

from __future__ import annotations

import grp
import logging
import os
import pwd
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from slurm_harp.accounting.jobstore import JobStore, SchemaVersionError
from slurm_harp.advice.default_account import DefaultAccounts
from slurm_harp.advice.partition_access import PartitionAccess
from slurm_harp.advice.recommend import Advice, Ask, advise
from slurm_harp.advice.site_partitions import SitePartitions
from slurm_harp.advice.tariff import Tariff
from slurm_harp.config import Settings
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.slurm_formats import node_memory_mb

log = logging.getLogger(__name__)

# --all: without it slurmctld leaves out, for a user who is not an operator, the Hidden partitions and
# those whose AllowGroups leave that user out (an operator, as install.md makes the daemon's user where
# PrivateData needs it, is shown them all). The advice checks each caller itself (partition_access.py,
# candidates.py: Hidden ones only when named).
PARTITIONS_ARGV = ("scontrol", "--all", "--oneliner", "show", "partition")
CONFIG_ARGV = ("scontrol", "show", "config")
# A node's memory less MemSpecLimit (slurm_formats.node_memory_mb): what a job may hold of it.
NODES_ARGV = ("scontrol", "--all", "--oneliner", "show", "node")
# Each user's default account as slurmctld holds it (advice.default_account): a job naming none gets it.
USERS_ARGV = ("scontrol", "--oneliner", "show", "assoc_mgr", "flags=users")
COMMAND_TIMEOUT_S = 10.0
# Failures read during a call are logged as text (str(exc)), never as the exception: a record that is
# kept (a test's log capture) would keep its traceback, so the call's frames and its gRPC call, and
# grpcio frees the call's stream only then: the next call on that connection (one stream each,
# advice_socket) was refused with RST_STREAM REFUSED_STREAM (tests/integration/test_advice_turns.py).
REFRESH_S = 300.0
NEWEST_RUNS = 1000  # the evidence: a user's newest runs of a job name, at most

Runner = Callable[[Sequence[str]], str]


class AdviceRefused(Exception):
    """The daemon cannot advise now (the job store cannot be read); the message is for the user."""


class UnknownUser(AdviceRefused):
    """The caller's uid has no user name here: there is no history to answer from."""


def run_scontrol(argv: Sequence[str]) -> str:
    """``scontrol``'s output; RuntimeError when it fails."""
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"{' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", errors="replace").strip()[:200]
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {detail}")
    return done.stdout.decode("utf-8", errors="replace")


@dataclass
class SlurmPartitions:
    """The cluster's partitions from scontrol, read at most every ``refresh_seconds``; when
    scontrol fails the last good reading is kept (none yet: no partition known), and so is a
    partition's when its record does not read (SitePartitions.read), and the nodes' memory when
    ``scontrol show node`` fails or does not read (none yet: a partition's TRES per node)."""

    runner: Runner = run_scontrol
    refresh_seconds: float = REFRESH_S
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._value = SitePartitions()
        self._read_at: float | None = None
        self._node_mem_mb: dict[str, int] = {}
        self._nodes = _Spell("the nodes' memory")
        self._users = _Spell("the users' default accounts")

    def __call__(self) -> SitePartitions:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= self.refresh_seconds:
                self._read_at = now
                try:
                    text, config = self.runner(PARTITIONS_ARGV), self.runner(CONFIG_ARGV)
                    read = SitePartitions.read(text, config, self._value, self._read_node_memory())
                except (RuntimeError, ValueError) as exc:
                    log.warning("advice: cannot read the partitions (keeping the last reading): %s", str(exc))
                else:
                    if read.unread and read.unread != self._value.unread:  # said once, not every reading
                        _warn_unread(read)
                    self._value = replace(read, default_accounts=self._read_default_accounts())
            return self._value

    def _read_node_memory(self) -> dict[str, int]:
        """By partition, what a job may hold of one node; the last reading when this one fails
        (logged once until one reads again): without it a node is priced at the partition's TRES,
        which counts the memory MemSpecLimit keeps from jobs."""
        try:
            self._node_mem_mb = node_memory_mb(self.runner(NODES_ARGV))
        except (RuntimeError, ValueError) as exc:
            kept = "keeping the last reading" if self._node_mem_mb else "the partitions' TRES instead"
            self._nodes.failed(f" ({kept}): {exc}")
        else:
            self._nodes.read()
        return self._node_mem_mb

    def _read_default_accounts(self) -> DefaultAccounts:
        """Each user's default account; the last reading when this one fails (logged once until
        one reads again): without it a job naming no account is not held to AllowAccounts."""
        try:
            read = DefaultAccounts.read(self.runner(USERS_ARGV))
        except RuntimeError as exc:
            self._users.failed(f": {exc}")
            return self._value.default_accounts
        self._users.read()
        return read


class _Spell:
    """A reading whose failures are logged once until it reads again."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing = False

    def failed(self, detail: str) -> None:
        if not self.failing:
            log.warning("advice: cannot read %s%s", self.what, detail)
        self.failing = True

    def read(self) -> None:
        if self.failing:
            log.info("advice: %s read again", self.what)
        self.failing = False


def _by_account(job: JobRequest, access: PartitionAccess) -> bool:
    """Whether ``access`` keeps ``job`` out by its account alone."""
    return access.refusal(None, job.account, None, job.user_id) in ("AllowAccounts", "DenyAccounts")


def _warn_unread(read: SitePartitions) -> None:
    for name, unread in sorted(read.unread.items()):
        kept = "keeping its last reading" if name in read.shapes else "left out of the advice"
        log.warning("advice: scontrol partition %s does not read (%s): %s", name, kept, unread.why)


def user_groups(uid: int) -> frozenset[str] | None:
    """The names of ``uid``'s groups, its primary one included, as slurmctld checks AllowGroups
    (None: no such user here, so they cannot be checked). A group without a name is left out."""
    try:
        user = pwd.getpwuid(uid)
        gids = os.getgrouplist(user.pw_name, user.pw_gid)
    except (KeyError, OSError):
        return None
    names = set()
    for gid in gids:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return frozenset(names)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise UnknownUser(f"uid {uid} has no user name on this host") from None


class Advisor:
    def __init__(
        self,
        settings: Settings | Callable[[], Settings],
        partitions: Callable[[], SitePartitions] | None = None,
        name_of: Callable[[int], str] = user_name,
        groups_of: Callable[[int], Collection[str] | None] = user_groups,
    ) -> None:
        """``settings``: or a function giving the current ones (the daemon's, which SIGHUP renews:
        new prices apply at once)."""
        self._settings = settings if callable(settings) else (lambda: settings)
        self._partitions = partitions or SlurmPartitions()
        self._name_of = name_of
        self._groups_of = groups_of
        self._warned_lock = threading.Lock()
        self._warned: tuple[tuple[str, ...], ...] = ((), ())  # the unlisted partitions last logged

    def advise(self, uid: int, ask: Ask) -> Advice:
        """Advice for the user ``uid`` (from the kernel) on ``ask``, from that user's jobs alone."""
        name = self._name_of(uid)
        job = replace(ask.job, user_name=name, user_id=uid)
        site = self._partitions()
        default = site.default_accounts.of(uid, name) if job.account is None else None
        if default is not None:
            job = replace(job, account=default)  # as slurmctld gives it: AllowAccounts admit by it
        settings = self._settings()
        db = settings.history.db
        runs = []
        if db is not None and job.job_name is not None:
            try:
                with JobStore(db, readonly=True) as store:
                    runs = store.runs_of(name, job.job_name, newest=NEWEST_RUNS)
            except (OSError, RuntimeError, SchemaVersionError, sqlite3.Error) as exc:
                log.warning("advice: cannot read the job store %s: %s", db, str(exc))
                raise AdviceRefused("the site's job history cannot be read now; try again later") from None
        self._warn_unlisted(settings, {*site.shapes, *site.unread})
        tariff = Tariff.of(settings.billing, site.table)
        floor = settings.policy.floors.get(Target.MEMORY, 0.0)
        advice = advise(
            replace(ask, job=job),
            runs,
            tariff,
            site.shapes,
            settings.advice.gpu_memory_bytes,
            memory_floor_mb=floor,
            groups=self._groups_of(uid),  # the partitions' AllowGroups admit the caller by them
            gpu_memory_headroom=settings.advice.gpu_memory_headroom,
            unread={name: unread.access for name, unread in site.unread.items()},
        )
        notes = list(advice.notes)
        asked = [site.shapes[p] for p in ask.partitions if p in site.shapes] or site.shapes.values()
        if default is not None and any(_by_account(job, shape.access) for shape in asked):
            notes.append(f"without --account your job is given your default account, {default}")
        if db is None:
            notes.append("the site keeps no job history ([history] db)")
        return replace(advice, notes=tuple(notes))

    def _warn_unlisted(self, settings: Settings, listed: Collection[str]) -> None:
        """Log the partitions harp.toml names that scontrol, read, does not list (a typo, a partition
        since removed): a [[billing.partition]] one is not priced, an [[advice.partition]] one's GPU
        memory is used for no partition. Once, and again only when they change (a reload, a new
        reading), not at every call."""
        if not listed:  # scontrol not read: nothing to compare with
            return
        billing = tuple(repr(p.name) for p in settings.billing.partitions if p.name not in listed)
        gpus = tuple(repr(n) for n in settings.advice.gpu_memory_bytes if n not in listed)
        with self._warned_lock:
            if (billing, gpus) == self._warned:
                return
            self._warned = (billing, gpus)
        said = [f"not priced ([[billing.partition]]): {', '.join(billing)}"] if billing else []
        said += [f"GPU memory not used ([[advice.partition]]): {', '.join(gpus)}"] if gpus else []
        if said:
            why = "advice: harp.toml names partitions scontrol does not list (a typo? gone?): %s"
            log.warning(why, "; ".join(said))
