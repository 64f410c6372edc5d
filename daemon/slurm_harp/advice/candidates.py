"""Which configurations the advice prices: the partitions, then the sizes in each.

Partitions: those the ask names that the site has, else all it lists (not Hidden ones), less
those that take no jobs or not the caller's (partition_access.py). Sizes: powers of two up to what
one job may have in the partition, with the sizes run and the size asked for. Each partition and
size is a round of pricing, so both are bounded: a made-up partition name costs nothing, and at
most MOST_SIZES of the sizes run are taken.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from slurm_harp.advice.evidence import Evidence
from slurm_harp.advice.partition_access import PartitionAccess
from slurm_harp.advice.partition_shape import PartitionShape
from slurm_harp.advice.tariff import Tariff
from slurm_harp.core.request import JobRequest

__all__ = ["LARGEST_POWER", "MOST_SIZES", "MOST_UNKNOWN", "admitted", "partitions", "sizes"]

LARGEST_POWER = 10  # candidate sizes: powers of two up to 2**10, with the sizes run and requested
MOST_SIZES = 16  # of the sizes run, at most this many are candidates (the most run)
MOST_UNKNOWN = 4  # partitions priced on their name alone when scontrol could not be read


def partitions(
    named: Sequence[str],
    own: str | None,
    shapes: Mapping[str, PartitionShape],
    tariff: Tariff,
    notes: list[str],
    unreadable: Mapping[str, PartitionAccess] | None = None,
) -> list[str]:
    """The partitions to price: those ``named`` that the site has, else every one it lists, the
    job's own (``own``, a comma list) first. The site has what scontrol printed (``shapes``) when
    it was read: a name that [billing] alone gives (a typo, a partition since removed) is not one,
    and a note says so; scontrol unread, what [billing] names. A Hidden partition is priced only
    when named, here or by the job's own ``-p``: the site keeps it out of listings. Only when the
    site's partitions are unknown are names taken on trust, at most MOST_UNKNOWN of them: each
    name costs a round of pricing, and a made-up one answers nothing. ``unreadable``: partitions
    scontrol lists whose record did not read (whom each takes jobs from): not priced, and a note
    says why (for a Hidden one, only when named)."""
    unreadable = unreadable or {}
    listed = bool(shapes) or bool(unreadable)  # scontrol was read
    known = set(shapes) if listed else set(tariff.partitions)
    if not named:
        names = sorted(n for n in known if n not in shapes or not shapes[n].access.hidden)
        if unlisted := sorted(set(tariff.partitions) - known - set(unreadable)):
            listed_here = _listed(unlisted)
            notes.append(f"[billing] prices partitions scontrol does not list; not priced: {listed_here}")
        mine: list[str] = []
        if own is not None:  # the job's own partitions first: those the site has, else on trust
            mine = list(dict.fromkeys(n.strip() for n in own.split(",") if n.strip()))
            if not listed:
                mine = mine[:MOST_UNKNOWN]
            else:
                _note_missing([n for n in mine if n not in known and n not in unreadable], (), notes)
            names = [*(n for n in mine if n in known or not listed), *(n for n in names if n not in mine)]
        shown = sorted(n for n, access in unreadable.items() if not access.hidden or n in mine)
        _note_missing((), shown, notes)
        if not names and shapes:  # scontrol was read: the partitions that read are all Hidden
            others = "the other partitions here are" if shown else "every partition here is"
            notes.append(f"{others} hidden: name one (-p, --partition) to compare")
        elif not names and not shown:
            notes.append("no partition is known (scontrol could not be read): name one to compare")
        return names
    if not listed:
        if len(named) > MOST_UNKNOWN:
            notes.append(f"no partition is known here: the first {MOST_UNKNOWN} of those named are compared")
        return list(named[:MOST_UNKNOWN])
    missing = [n for n in named if n not in known]
    _note_missing([n for n in missing if n not in unreadable], [n for n in missing if n in unreadable], notes)
    return [n for n in named if n in known]


def _note_missing(unknown: Sequence[str], unreadable: Sequence[str], notes: list[str]) -> None:
    if unknown:
        notes.append(f"no such partition here: {_listed(unknown)}")
    if unreadable:
        notes.append(f"not compared, scontrol's description of it does not read: {_listed(unreadable)}")


def admitted(
    names: list[str],
    shapes: Mapping[str, PartitionShape],
    job: JobRequest,
    groups: Collection[str] | None,
    notes: list[str],
) -> list[str]:
    """``names`` without the partitions that take no jobs or not this caller's (partition_access:
    what cannot be checked is let through), or run none (MaxTime=0), which a note names with the
    field that keeps it out."""
    kept, out = [], []
    for name in names:
        shape = shapes.get(name)
        why = None if shape is None else shape.access.refusal(groups, job.account, job.qos, job.user_id)
        if why is None and shape is not None and shape.max_minutes == 0:
            why = "MaxTime=0"  # a job may run 0 minutes there: none runs
        if why is None:
            kept.append(name)
        else:
            out.append(f"{name} ({why})")
    if out:
        notes.append(f"partitions left out: {_listed(out)}")
    return kept


def sizes(most: int | None, evidence: Evidence, requested: int | None, notes: list[str]) -> list[int]:
    """The sizes to price: the powers of two the partition holds, the size asked for and the
    sizes run; of the sizes run, the MOST_SIZES most run (each size is a round of pricing)."""
    out = {2**i for i in range(LARGEST_POWER + 1)} if most else set()
    run = [size for size, _ in sorted(evidence.sizes(), key=lambda sn: (-sn[1], sn[0]))]
    if most:
        run = [size for size in run if size <= most]
    if len(run) > MOST_SIZES:
        notes.append(f"of the {len(run)} sizes run, the {MOST_SIZES} run most often are compared")
    out |= set(run[:MOST_SIZES])
    if requested:
        out.add(requested)
    if most:
        out = {s for s in out if s <= most}
    elif evidence.runs:  # nothing known of the partition: powers of two between the sizes run
        low, high = min(r.size for r in evidence.runs), max(r.size for r in evidence.runs)
        out |= {2**i for i in range(LARGEST_POWER + 1) if low <= 2**i <= high}
    return sorted(out)


def _listed(names: Sequence[str]) -> str:
    """The first three of ``names``, and how many more (a note stays short)."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
