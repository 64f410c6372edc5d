"""The tag harp writes in a job's admin_comment, and reads back: what it did to the job and what its
user asked for, for the guard, the accuracy figures and training."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_harp.core.decision import Action, TargetDecision
from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Mode
from slurm_harp.core.request import JobRequest, Target

TAG_PREFIX = "harp:"
# Each target's letter in a tag (t=, m=, c=; t0= its user's own).
TAG_KEY = {Target.TIME: "t", Target.MEMORY: "m", Target.CPUS: "c"}
_FLAG = {Action.REWRITE: "!", Action.SET_TIME_MIN: "~"}


def annotation_for(mode: Mode, targets: Sequence[TargetDecision], request: JobRequest) -> str:
    """A compact tag without spaces, e.g. ``harp:shadow,t=45/q0.9,v=time@2026...``.

    ``!`` marks a lowered limit, ``~`` a time_min set, ``/k`` (shadow mode) a value that a changing
    mode would not have applied (the calibrated rule or a cold user keeps the request); ``t0=``
    (``m0=``, ``c0=``) records what the user asked for beside it, so that the guard (time_min and
    extend modes) and the accuracy figures (core-hours saved) need nothing but the job itself."""
    parts = []
    for t in targets:
        if t.predicted is None or t.action is Action.NONE:
            continue
        # An annotated prediction is the model's raw value (a linear model's may be any finite
        # number): held within what parse_tag reads (0 to MAX_TAG_VALUE), or the whole tag, its t0=
        # among it, would be none.
        value = t.new_value if t.new_value is not None else min(max(round(t.predicted), 0), MAX_TAG_VALUE)
        quantile = f"/q{t.quantile:g}" if t.quantile is not None else ""
        kept = "/k" if t.kept else ""
        parts.append(f"{TAG_KEY[t.target]}{_FLAG.get(t.action, '')}={value}{quantile}{kept}")
        asked = request.requested(t.target)
        if t.new_value is not None and asked is not None:
            parts.append(f"{TAG_KEY[t.target]}0={round(asked)}")
    if not parts:
        return ""
    versions = sorted({t.model_version for t in targets if t.model_version and t.predicted is not None})
    parts.append("v=" + "+".join(v.replace(",", "_").replace(" ", "_") for v in versions))
    return TAG_PREFIX + mode.value + "," + ",".join(parts)


@dataclass(frozen=True, slots=True)
class Tag:
    """A harp tag read back from a job's admin_comment (annotation_for's format)."""

    mode: str
    values: Mapping[str, int]  # key ("t", "m", "c") -> value written
    flags: Mapping[str, str]  # key -> "!" (lowered), "~" (time_min set) or ""
    own: Mapping[str, int]  # key -> the user's own value (``t0=``), where recorded
    versions: tuple[str, ...]
    kept: frozenset[str] = frozenset()  # keys marked ``/k``: a changing mode keeps the request

    @property
    def extendable_minutes(self) -> int | None:
        """The user's own time limit when harp shortened it or set its time_min and the guard may
        extend the job up to it; None otherwise."""
        if self.mode in (Mode.EXTEND.value, Mode.TIME_MIN.value) and self.flags.get("t") in ("!", "~"):
            return self.own.get("t")
        return None


# A tag's numbers: ASCII digits, at most MAX_TAG_VALUE (2**53, past any limit Slurm holds: time
# and CPUs are 32-bit, memory 2**53 MB is 8 ZB, and every float below it is exact). A number past it
# is a malformed tag, not one acted on: 400 digits raised OverflowError in every reader that
# multiplies it (the guard, the daemon's history feed, the harvest's extension history, training).
MAX_TAG_VALUE = 2**53
_NUMBER = r"([0-9]{1,16})"  # re.ASCII: \d would take any script's digits, and int() reads them
_ITEM = re.compile(rf"^([tmc])([!~]?)={_NUMBER}(?:/q[0-9.e-]+)?(/k)?$", re.ASCII)
_OWN = re.compile(rf"^([tmc])0={_NUMBER}$", re.ASCII)


# Tokens are split as the plugin splits them (Lua's %s: ASCII whitespace only), so that the tokens it
# strips from what a user sent and the tokens read here are the same: str.split() would also split on
# U+00A0, U+2003 or \x1f, which would make "x\x1fharp:..." a tag here and no tag to the plugin.
_SPACE = re.compile(r"[ \t\n\v\f\r]+")


def last_tag(admin_comment: str | None) -> str | None:
    """The last harp token in ``admin_comment`` (other tools append their own), or None."""
    tokens = [tok for tok in _SPACE.split(admin_comment or "") if tok.startswith(TAG_PREFIX)]
    return tokens[-1] if tokens else None


def parse_tag(admin_comment: str | None) -> Tag | None:
    """The last harp tag in ``admin_comment`` (other tools append their own tokens), or None when
    there is none or it does not parse (a malformed tag, a number past MAX_TAG_VALUE among them, is
    never acted on)."""
    token = last_tag(admin_comment)
    if token is None:
        return None
    mode, _, rest = token[len(TAG_PREFIX) :].partition(",")
    if mode not in {m.value for m in Mode}:
        return None
    values: dict[str, int] = {}
    flags: dict[str, str] = {}
    own: dict[str, int] = {}
    versions: tuple[str, ...] = ()
    kept: set[str] = set()
    for item in rest.split(",") if rest else ():
        if item.startswith("v="):
            versions = tuple(v for v in item[2:].split("+") if v)
        elif m := _ITEM.match(item):
            values[m[1]], flags[m[1]] = int(m[3]), m[2]
            if m[4]:
                kept.add(m[1])
        elif m := _OWN.match(item):
            own[m[1]] = int(m[2])
        else:
            return None
    if any(n > MAX_TAG_VALUE for n in (*values.values(), *own.values())):
        return None
    return Tag(mode=mode, values=values, flags=flags, own=own, versions=versions, kept=frozenset(kept))


def submitted_request(request: JobRequest, tag: Tag) -> JobRequest:
    """The request as the daemon saw it at submission: accounting shows the limits harp set, the
    tag's ``t0=`` (``m0=``, ``c0=``) what the user asked for."""
    own = tag.own
    if "t" in own:
        request = replace(request, time_limit_minutes=own["t"])
    if "c" in own:
        request = replace(request, min_cpus=own["c"])
    if "m" in own:
        request = _own_memory(request, own["m"])
    return request


def _own_memory(request: JobRequest, per_node_mb: int) -> JobRequest:
    """``request`` with its user's own memory, ``m0=``, back in the field the user gave. ``m0`` is MB
    per node, as the daemon reads any request (JobRequest.requested); for ``--mem-per-cpu`` the plugin
    rewrites the MB per CPU, so they are ``m0`` over the user's own CPUs per node (``min_cpus``, ``c0=``
    restored first), as the daemon made them: exact with at least one CPU per node."""
    if request.mem_per_node_mb is not None:
        return replace(request, mem_per_node_mb=per_node_mb)
    if request.mem_per_cpu_mb is not None and request.min_cpus:
        nodes = max(request.min_nodes or 1, 1)
        return replace(request, mem_per_cpu_mb=round(per_node_mb * nodes / request.min_cpus))
    return request


def as_submitted(record: JobRecord) -> JobRecord:
    """``record`` with the request its user submitted (submitted_request), for learning from it:
    accounting shows the limit harp set, or the guard extended a job to (close to its run time),
    where the daemon saw the user's own. As it is without a tag that records one."""
    # Most tags hold no t0=, m0= or c0= item (shadow mode, jobs left as asked): those are not parsed,
    # which at 15 µs a tag added a minute to a nightly over a million jobs.
    if not record.harp_tag or "0=" not in record.harp_tag:
        return record
    tag = parse_tag(record.harp_tag)
    if tag is None or not tag.own:
        return record
    return replace(record, request=submitted_request(record.request, tag))


def own_cores(record: JobRecord, tag: Tag | None = None) -> float:
    """The CPUs ``record``'s user asked for: the tag's ``c0`` where harp cut them (``c!``), else the
    CPUs the job held (JobRecord.cores, which prefers those allocated: harp's cut, for such a job).
    ``tag``: the record's, when already parsed (None: parsed here if it may hold a ``c0``)."""
    if tag is None:
        if not record.harp_tag or "c0=" not in record.harp_tag:
            return record.cores
        tag = parse_tag(record.harp_tag)
    own = None if tag is None else tag.own.get("c")
    return float(own) if own and tag is not None and tag.flags.get("c") == "!" else record.cores
