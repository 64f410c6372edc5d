"""The advice as `harp advise` prints it: a short table of the options priced, the ones not priced
and why, then the cheapest, the fastest and the Pareto set in one line each. Every text from the
daemon is shown escaped where not printable (a job's name may come from someone else's script)."""

from __future__ import annotations

import math

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.commands.terminal import printable_lines


def _size(o: pb.AdviceOption, unit: str) -> str:
    return f"{o.size} {unit}{'s' if o.size != 1 else ''}"


def _minutes(value: float) -> str:
    if math.isinf(value):
        return "never"
    return f"{value:.1f} min" if value < 100 else f"{value / 60:.1f} h"


def _cost(value: float) -> str:
    return f"{value:.4g}"


def _all_memory(request: pb.AdviceRequest) -> bool:
    """Whether the job asks ``--mem=0``, all of a node's memory: an option without an amount keeps
    it (the node's memory unknown), never the partition's default."""
    return request.job.HasField("mem_per_node_mb") and request.job.mem_per_node_mb == 0


def describe(
    o: pb.AdviceOption, unit: str, currency: str, all_memory: bool = False, exclusive: bool = False
) -> str:
    """One option as what to ask for; ``--exclusive`` kept where the job asks it (priced so)."""
    mem = f" --mem={o.mem_per_node_mb}M" if o.mem_per_node_mb else (" --mem=0" if all_memory else "")
    whole = " --exclusive" if exclusive else ""
    return (
        f"{o.partition}, {_size(o, unit)} on {o.nodes} node{'s' if o.nodes != 1 else ''}: "
        f"--time={o.time_limit_minutes}{mem}{whole}"
        f", expected {_minutes(o.expected_minutes)}, {_cost(o.expected_cost)} {currency}"
    )


def render(advice: pb.Advice, request: pb.AdviceRequest) -> str:
    """The answer as a short table and three lines; the job's name, the notes and all other text
    shown escaped where not printable (a name may come from someone else's script)."""
    unit, all_memory = advice.unit, _all_memory(request)
    no_amount = "all (--mem=0)" if all_memory else "default"
    lines = [
        f'advice for "{advice.job_name}" of user {advice.user_name}, from your runs: {advice.evidence}',
        f"(costs in {advice.currency}, re-runs after a kill at the time limit included; "
        "run time only: queue wait is not counted)",
        "",
    ]
    mark = {i: "" for i in range(len(advice.options))}
    if advice.HasField("cheapest"):
        mark[advice.cheapest] += "C"
    if advice.HasField("fastest"):
        mark[advice.fastest] += "F"
    for i in advice.pareto:
        mark[i] += "P"
    header = (
        "",
        "partition",
        unit + "s",
        "nodes",
        "mem/node",
        "limit",
        "expected",
        "longest",
        "cost",
        "evidence",
    )
    rows = [header]
    unpriced: dict[tuple[str, str], list[int]] = {}
    for i, o in enumerate(advice.options):
        if not o.priced:
            unpriced.setdefault((o.partition, o.note or o.evidence), []).append(o.size)
            continue
        evidence = "log-log fit" if o.evidence.startswith("fit of") else "runs at this size"
        rows.append((
            mark[i], o.partition, str(o.size), str(o.nodes),
            f"{o.mem_per_node_mb} MB" if o.mem_per_node_mb else no_amount, f"{o.time_limit_minutes} min",
            _minutes(o.expected_minutes), _minutes(o.longest_minutes), _cost(o.expected_cost),
            evidence + (f"; {o.note}" if o.note else ""),
        ))  # fmt: skip
    if len(rows) > 1:
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        for r in rows:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    else:
        lines.append("no option has evidence")
    if unpriced:
        lines.append("")
        for (partition, why), sizes in unpriced.items():
            lines.append(f"not priced in {partition}, {', '.join(map(str, sizes))} {unit}s: {why}")
    lines.append("")
    deadline = f"within {_minutes(request.deadline_minutes)}" if request.HasField("deadline_minutes") else ""
    budget = f"within {_cost(request.budget)} {advice.currency}" if request.HasField("budget") else ""
    cheapest = advice.options[advice.cheapest] if advice.HasField("cheapest") else None
    fastest = advice.options[advice.fastest] if advice.HasField("fastest") else None
    said = {"C": cheapest, "F": fastest}
    shown = {
        k: describe(o, unit, advice.currency, all_memory, request.exclusive) if o else "none"
        for k, o in said.items()
    }
    lines.append(f"C cheapest{' ' + deadline if deadline else ''}: {shown['C']}")
    lines.append(f"F fastest{' ' + budget if budget else ''}: {shown['F']}")
    lines.append("P Pareto set (none both cheaper and faster): "
                 + (", ".join(f"{advice.options[i].partition} {_size(advice.options[i], unit)}"
                              for i in advice.pareto) or "none"))  # fmt: skip
    lines += [f"note: {n}" for n in advice.notes]
    return printable_lines(lines)
