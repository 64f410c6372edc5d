"""The QOS MaxWall that bounds a running job: its own QOS's, or its partition's QOS's (slurm.conf's
``PartitionName=... QOS=``), whichever Slurm applies.

Slurm 22.05 (acct_policy_set_qos_order, _qos_job_runnable_pre_select) checks the partition's QOS
first and the job's second, unless the job's QOS has the OverPartQOS flag (then the job's first); the
first of the two that sets a MaxWall is the job's, and the second's counts only where the first sets
none. So a partition QOS's MaxWall bounds every job in the partition, one longer than the job's own
QOS's included, unless the job's QOS overrides it.

A QOS whose MaxWall does not read (logged) sets none here, as one without a MaxWall: the other QOS
then bounds the job, if it sets one.

QOS names are compared lowered (core.text.lowered, A-Z only), on every side: slurmctld matches them
in any case (assoc_mgr.c _list_find_qos, xstrcasecmp), sacctmgr lists them as accounting keeps them,
in lower case, and a partition's QOS is printed as slurm.conf typed it (``QOS=Part_Long``). Compared
as printed, such a partition's QOS was found in no table, and its MaxWall bounded nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.core.text import lowered
from slurm_harp.slurm_formats import parse_max_time, scontrol_records

log = logging.getLogger(__name__)

QOS_ARGV = ("sacctmgr", "--noheader", "--parsable2", "show", "qos", "format=Name,MaxWall,Flags")
OVER_PART_QOS = "overpartqos"  # sacctmgr's flag, any case (str_2_qos_flags)


@dataclass(frozen=True)
class QosTable:
    max_minutes: Mapping[str, int] = field(default_factory=dict)  # QOS (lowered) -> MaxWall (none: unbounded)
    over_part: frozenset[str] = frozenset()  # QOS (lowered) flagged OverPartQOS

    def max_wall(self, job_qos: str, partition_qos: str | None) -> tuple[int, str] | None:
        """(the MaxWall in minutes that bounds a job of ``job_qos`` in a partition of
        ``partition_qos``, what sets it); None where neither sets one. Names in any case."""
        job_qos, partition_qos = lowered(job_qos), partition_qos and lowered(partition_qos)
        order = [job_qos]
        if partition_qos and partition_qos != job_qos:
            order = [job_qos, partition_qos] if job_qos in self.over_part else [partition_qos, job_qos]
        for name in order:
            if name in self.max_minutes:
                whose = "QOS" if name == job_qos else "its partition's QOS"
                return self.max_minutes[name], f"{whose} {name} MaxWall"
        return None


def parse_qos(text: str) -> QosTable:
    """QOS_ARGV's output: each QOS's MaxWall in minutes (one without, or whose MaxWall does not read,
    logged, sets none) and the QOS flagged OverPartQOS."""
    limits, over = {}, set()
    for line in text.split("\n"):
        name, _, rest = line.partition("|")
        wall, _, flags = rest.partition("|")
        name = lowered(name.strip())
        if not name:
            continue
        minutes = bound_minutes(wall, f"QOS {name!r:.40} MaxWall")
        if minutes is not None:
            limits[name] = minutes
        if OVER_PART_QOS in (f.strip().lower() for f in flags.split(",")):
            over.add(name)
    return QosTable(limits, frozenset(over))


def parse_partition_qos(text: str) -> dict[str, str]:
    """Each partition's QOS (lowered) from ``scontrol show partition`` (``QoS=``; ``N/A``: none)."""
    out = {}
    for fields in scontrol_records(text, "PartitionName"):
        qos = next((v for k, v in fields.items() if k.lower() == "qos"), "")
        if fields["PartitionName"] and qos and qos not in ("N/A", "(null)"):
            out[fields["PartitionName"]] = lowered(qos)
    return out


def bound_minutes(text: str, what: str) -> int | None:
    """A bound's limit (a MaxWall here, a partition's MaxTime in guard.bounds) in minutes; None for
    no limit and, logged naming ``what``, for a limit that does not read."""
    try:
        return parse_max_time(text)
    except Exception as exc:  # one odd field, whatever it raises, never stops a poll
        log.warning("%s unreadable, not a bound: %s", what, exc)
        return None
