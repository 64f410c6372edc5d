"""Render evaluation results: Markdown tables and a JSON document of every figure (the Pareto PNG:
report_plot.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slurm_harp.core.extension import DEFAULT_LEAD_S
from slurm_harp.core.request import Target
from slurm_harp.evaluation.costs import Figures
from slurm_harp.evaluation.frontier import best_cut, least_lost
from slurm_harp.evaluation.observed import UNIT
from slurm_harp.evaluation.runner import Outcome, TargetReport
from slurm_harp.evaluation.shown import utc_moment, utc_text
from slurm_harp.evaluation.split import Timeline

FORMAT = "harp-evaluation/1"
# Where the hindsight frontier is read: the cut at these % lost, and the % lost a cut of
# FRONTIER_CUT takes (the quality target slurm-harp aims at: 40 % at 1 % newly killed).
FRONTIER_LOST: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0)
FRONTIER_CUT = 40.0


@dataclass(frozen=True)
class Context:
    """What was evaluated and how, for headings and the JSON document."""

    trace: str
    source: str
    kill_budget: float
    fractions: tuple[float, float]
    timeline: Timeline
    input_jobs: int


def _number(value: float | None, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.{digits}f}"


def _core_hours(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


KILL_FREE_NOTE = (
    "Waste cut % counts a newly killed job's waste as gone (it no longer finishes); cut without kills % "
    "is the same cut with each newly killed job keeping its request's waste: what the jobs that still "
    "finish save. Re-execution prices the kills themselves."
)
MULTIPLIERS = ("multiplier", "factor")  # knobs that scale a prediction: shown as x<value>


def _knob(outcome: Outcome) -> str:
    """Multipliers as x<value>, any other knob (e.g. ours: penalty, rungs) as name=<value>."""
    return " ".join(f"x{v:.3g}" if k in MULTIPLIERS else f"{k}={v:.3g}" for k, v in outcome.knob.items())


def _cells(outcome: Outcome, target: Target) -> list[str]:
    f: Figures = outcome.test or {}
    cells = [
        _number(f.get("upp")),
        _number(f.get("up_mape")),
        _number(f.get("ov_mape")),
        _number(f.get("aea"), 3),
        _number(f.get("waste_cut_pct")),
    ]
    if target is Target.CPUS:
        return [*cells, "n/a", "n/a", _number(f.get("slowed_pct")), _number(f.get("alloc_core_h_cut_pct"))]
    extra = f.get("reexec_extra_core_h")
    reexec = f"{_core_hours(f.get('reexec_core_h'))} (+{_core_hours(extra)})"
    return [*cells, _number(f.get("newly_killed_pct"), 2), _number(f.get("kill_free_cut_pct")), reexec]


def _window(timeline: Timeline, window: str) -> str:
    first, end = timeline.windows()[window]
    if end <= first:
        return "empty"
    times = [timeline.jobs[i].request.submit_time for i in (first, end - 1)]
    days = [utc_text(t or 0, "%Y-%m-%d") for t in times]
    return f"{days[0]} .. {days[1]}"


def table(report: TargetReport, ctx: Context) -> str:
    """One target's results on the test window as a Markdown table with a heading and notes."""
    target = report.target
    lines = [f"### {target.value} ({UNIT[target]}), {ctx.trace}"]
    if report.skipped:
        return "\n".join([*lines, "", f"skipped: {report.skipped}", ""])
    lines += [
        "",
        f"Test window {_window(ctx.timeline, 'test')}: {report.usable['test']} jobs with a request and an "
        f"observed value; kill budget {100 * ctx.kill_budget:g} % met on validation "
        f"({report.usable['validation']} jobs, {_window(ctx.timeline, 'validation')}).",
        "",
    ]
    header = ["strategy", "knob", "UPP %", "UP_MAPE %", "OV_MAPE %", "AEA", "waste cut %", "newly killed %"]
    header += (
        ["cut without kills %", "re-exec core-h (extra)"]
        if target is not Target.CPUS
        else ["re-exec", "slowed %", "alloc cut %"]
    )
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for outcome in report.outcomes:
        if outcome.error:
            row = [outcome.name, "failed: " + outcome.error.replace("|", "/")[:120]]
            row += [""] * (len(header) - 2)
        else:
            row = [outcome.name, _knob(outcome), *_cells(outcome, target)]
        lines.append("| " + " | ".join(row) + " |")
    for name, why in report.unavailable.items():
        lines.append(f"\n{name}: not evaluated: {why}")
    if target is not Target.CPUS:
        lines += ["", KILL_FREE_NOTE]
    if target is Target.TIME:
        lines += _extend_table(report)
    return "\n".join([*lines, *_hindsight(report), *_ceiling(report, ctx.kill_budget), ""])


def _extend_table(report: TargetReport) -> list[str]:
    """The same limits in extend mode: extended by `harp guard` up to the request, never killed."""
    lines = [
        "",
        f"The same limits in extend mode (extended by harp guard's steps up to the request, lead "
        f"{DEFAULT_LEAD_S:g} s; time_min mode extends at most these):",
        "",
        "| strategy | waste cut % | killed before own limit % | jobs extended % "
        "| extensions per extended job (mean / max) |",
        "|---|---|---|---|---|",
    ]
    for outcome in report.outcomes:
        f: Figures = outcome.test or {}
        if outcome.error or "extend_waste_cut_pct" not in f:
            continue
        per_job = f"{_number(f.get('extensions_mean'), 2)} / {_number(f.get('extensions_max'), 0)}"
        cells = [_number(f.get("extend_waste_cut_pct")), _number(f.get("extend_killed_pct"), 2)]
        lines.append(
            f"| {outcome.name} | {' | '.join(cells)} | {_number(f.get('extended_pct'))} | {per_job} |"
        )
    return lines


def frontier_figures(outcome: Outcome) -> dict[str, dict[str, float | None]] | None:
    """The outcome's curve read at FRONTIER_LOST and FRONTIER_CUT; None without a curve."""
    if not outcome.curve:
        return None
    return {
        "best_cut_pct": {f"{lost:g}": best_cut(outcome.curve, lost) for lost in FRONTIER_LOST},
        "lost_pct_for_cut": {f"{FRONTIER_CUT:g}": least_lost(outcome.curve, FRONTIER_CUT)},
    }


def _lost(target: Target) -> str:
    """What a too-low limit does to a job of ``target``: CPUs slow it, the others kill it."""
    return "slowed" if target is Target.CPUS else "newly killed"


def _hindsight(report: TargetReport) -> list[str]:
    """The trade-off each strategy's knob could reach on test: what a site choosing another kill
    budget could expect, and how far a strategy is from the target cut. Hindsight, not a result:
    the knob is read off the test window itself."""
    rows = [(o.name, f) for o in report.outcomes if not o.error and (f := frontier_figures(o))]
    if not rows:
        return []
    lost = _lost(report.target)
    lines = [
        "",
        f"Trade-off on the test window in hindsight (each strategy's knob swept on test; the table above "
        f"is the setting chosen on validation): the largest waste cut % with at most the given % {lost}, "
        f"and the fewest % {lost} that reaches a {FRONTIER_CUT:g} % cut. Read off the curve's traced "
        "points (a grid of the knob), so a setting between two of them may do a little better.",
        "",
    ]
    header = ["strategy", *(f"≤ {x:g} %" for x in FRONTIER_LOST), f"{lost} % for a {FRONTIER_CUT:g} % cut"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, f in rows:
        cuts = [_number(f["best_cut_pct"][f"{x:g}"]) for x in FRONTIER_LOST]
        need = f["lost_pct_for_cut"][f"{FRONTIER_CUT:g}"]
        reached = "not reached" if need is None else f"{need:.2f}"
        lines.append("| " + " | ".join([name, *cuts, reached]) + " |")
    return lines


def _ceiling(report: TargetReport, budget: float) -> list[str]:
    """The hindsight ceiling per grouping (evaluation/ceiling.py): how far any rule giving a group
    one limit could go, to set the strategies' figures against."""
    if not report.ceiling:
        return []
    lost = _lost(report.target)
    lines = [
        "",
        f"Ceiling in hindsight: one limit per group of test jobs, picked on the test window itself for the "
        f"largest waste cut with at most {100 * budget:g} % {lost}. No strategy can choose so; a strategy "
        "above the per-user ceiling tells a user's jobs apart better than any one limit per user could.",
        "",
        f"| one limit per | groups | waste cut % | {lost} % |",
        "|---|---|---|---|",
    ]
    for name, f in report.ceiling.items():
        cells = [name, f"{f['groups']:.0f}", _number(f["waste_cut_pct"]), _number(f["lost_pct"], 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _clean(value: Any) -> Any:
    """JSON without NaN/inf (not standard JSON): they become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def document(reports: Sequence[TargetReport], ctx: Context) -> dict[str, Any]:
    """Every figure: trace, split sizes and windows, per target and strategy the test and validation
    figures, the knob, the Pareto curve (newly killed %, waste cut %) on test and its reading at
    FRONTIER_LOST and FRONTIER_CUT (``frontier``), errors; per target the hindsight ``ceiling``."""
    timeline = ctx.timeline
    windows = {}
    for name, (first, end) in timeline.windows().items():
        times = (
            [timeline.jobs[i].request.submit_time for i in (first, end - 1)] if end > first else [None, None]
        )
        windows[name] = {
            "jobs": end - first,
            "first_submit": times[0],
            "last_submit": times[1],
            "utc": [None if t is None or (m := utc_moment(t)) is None else m.isoformat() for t in times],
        }
    targets: dict[str, Any] = {}
    for report in reports:
        targets[report.target.value] = {
            "unit": UNIT[report.target],
            "usable_jobs": report.usable,
            "skipped": report.skipped,
            "unavailable": report.unavailable,
            "ceiling": report.ceiling,
            "strategies": {
                o.name: {
                    "test": o.test,
                    "validation": o.validation,
                    "knob": o.knob,
                    "pareto": None if o.curve is None else [list(p) for p in o.curve],
                    "frontier": frontier_figures(o),
                    "error": o.error,
                    "seconds": o.seconds,
                }
                for o in report.outcomes
            },
        }
    doc: dict[str, Any] = _clean(
        {
            "format": FORMAT,
            "trace": ctx.trace,
            "source": ctx.source,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "kill_budget": ctx.kill_budget,
            "split": {
                "fractions": {"train": ctx.fractions[0], "validation": ctx.fractions[1]},
                "input_jobs": ctx.input_jobs,
                "dropped_jobs": timeline.dropped,
                "windows": windows,
            },
            "targets": targets,
        }
    )
    return doc
