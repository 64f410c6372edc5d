"""The page of `harp report`: index.html beside its PNG plots, read offline (no script, nothing
fetched). Every text from the job store (partitions, model versions, tag modes) is escaped."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from slurm_harp.core.policy import Mode
from slurm_harp.core.request import Target
from slurm_harp.evaluation.shown import utc_text
from slurm_harp.evaluation.site_report import SiteReport
from slurm_harp.evaluation.site_report_plots import PLOT_FILES, draw_all
from slurm_harp.evaluation.site_targets import AT_LIMIT
from slurm_harp.output_dir import OutputDir

STYLE = """
body { font-family: sans-serif; max-width: 70em; margin: 1em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f3f7; text-align: left; }
.problem { background: #fff4e0; border: 1px solid #d9822b; padding: 0.6em; }
.kills { color: #b00020; font-weight: bold; }
img { max-width: 100%; } p.note, li { font-size: 0.92em; }
"""
NUMBER = re.compile(r"^(-?[\d,.]+( %)?|-)$")  # right-aligned in a table
MODE_MEANING = {
    Mode.SHADOW: "off / shadow: every job keeps its request",
    Mode.TIME_MIN: "time_min: the limit is kept, time_min set to harp's value",
    Mode.EXTEND: "extend: the limit cut, harp guard extends it up to the request",
    Mode.REWRITE: "rewrite: the limit cut, a job that needs more is killed",
}


def nothing_to_report(report: SiteReport) -> str | None:
    """Why the window has no figures to show, or None when it has."""
    window = f"since {when(report.since)}" + (
        f" in {', '.join(report.partitions)}" if report.partitions else ""
    )
    if report.jobs == 0:
        return f"No job ended {window}: nothing to report (has `harp harvest` run?)."
    if report.tagged == 0:
        return (
            f"None of the {report.jobs:,} jobs that ended {window} has a harp tag: harp did not see them "
            "(mode off, daemon not running, or the plugin not installed)."
        )
    if not report.other_targets:  # memory and CPU figures are something to report
        return no_time_figures(report)
    return None


def no_time_figures(report: SiteReport) -> str | None:
    """Why the page has no time figures, or None when it has."""
    if report.timed:
        return None
    return f"None of the {report.tagged:,} tagged jobs has a time prediction and a run time to compare."


def write_site_report(report: SiteReport, out: OutputDir, policy_from: str) -> Path:
    """Write index.html and its plots into ``out``; the page's path. ``policy_from``: where the
    policy applied to shadow values comes from (a configuration file, or harp's defaults).

    Every plot is drawn before a file is touched: without matplotlib (ImportError) or with a plot
    it cannot draw (DrawError) the page of an earlier run stays as it was. Then the page and every
    plot an earlier run may have drawn go, and the new page is written last
    (``OutputDir.write_run``): a run with fewer plots leaves none of an earlier run's, and one
    whose plot cannot be written (WriteError, naming the file) no page over plots of two runs."""
    plots = draw_all(report)
    images = {name: filename for name, (filename, _) in plots.items()}
    files = dict(plots.values())
    page = ("index.html", render(report, images, policy_from))
    return out.write_run(files, table=page, names=PLOT_FILES.values())[0]


def render(report: SiteReport, images: dict[str, str], policy_from: str) -> str:
    problem = nothing_to_report(report)
    body = [
        f"<h1>slurm-harp report: jobs that ended since {when(report.since)}</h1>",
        *_summary(report, policy_from),
    ]
    untimed = no_time_figures(report)
    if problem is not None:
        body.insert(1, f'<p class="problem">{escape(problem)}</p>')
    elif untimed is not None:  # memory or CPU predictions only
        body += [f'<p class="problem">{escape(untimed)}</p>', "<h2>What rewrite mode would have done</h2>"]
        body += _other_targets(report)
    else:
        body += _modes(report, images) + _partitions(report, images) + _accuracy(images) + _notes(report)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>slurm-harp report since {when(report.since)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _summary(report: SiteReport, policy_from: str) -> list[str]:
    rows = [
        ("window", f"jobs that ended from {when(report.since)} (first {when(report.first_end)}, "
                   f"last {when(report.last_end)})"),
        ("partitions", ", ".join(report.partitions) or "all"),
        ("jobs", f"{report.jobs:,}"),
        ("with a harp tag", f"{report.tagged:,}"),
        ("skipped: no harp tag", f"{report.untagged:,} (harp did not see them: off, daemon down, opted out)"),
        ("skipped: unreadable tag", f"{report.unreadable:,}"),
        ("in the time figures", f"{report.timed:,} (tagged, with a time prediction, a limit and a run time)"),
        ("tags by mode", _counts(report.tag_modes)),
        ("model versions", _counts(report.versions)),
        ("policy applied to shadow values", f"{_policy(report)} ({policy_from})"),
    ]  # fmt: skip
    return ["<h2>Summary</h2>", table(("", "value"), rows, align_numbers=False)]


def _modes(report: SiteReport, images: dict[str, str]) -> list[str]:
    asked = report.modes[0]
    rows = []
    for row in report.modes:
        saved = asked.waste_core_h - row.waste_core_h
        cut = 100.0 * saved / asked.waste_core_h if asked.waste_core_h else math.nan
        rows.append((
            MODE_MEANING[row.mode], f"{row.changed:,}", core_h(row.reserved_core_h), core_h(row.waste_core_h),
            percent(cut), Killed(row.killed, report.timed), core_h(row.lost_core_h),
            core_h(saved - row.lost_core_h),
            "depends on the schedule" if row.extended is None else f"{row.extended:,}",
        ))  # fmt: skip
    head = ("mode", "jobs changed", "reserved core-h", "waste core-h", "waste cut", "killed before own limit",
            "lost to kills core-h", "net core-h saved", "jobs extended")  # fmt: skip
    return [
        "<h2>What each mode would have done</h2>",
        f"<p>On the {report.timed:,} jobs with a time prediction. Reserved: limit x the CPUs each user "
        "asked for, harp's CPU cuts aside (rewrite's CPU cut is in the table below); in extend mode the "
        "limit after the guard's extensions. "
        "Waste: reserved but unused by the jobs that finish (after the guard's extensions). Killed, in "
        "rewrite: jobs that finished under their own limit and would not under harp's, plus every job a "
        "limit of harp's did stop (a rewrite to it stops the job again). time_min and extend kill no job "
        "before its own limit by design: a count there is of jobs harp did kill while they ran in that "
        "mode (the guard down or late), to look into. "
        "Lost to kills: of each job a rewrite would kill, the attempt cut short and the unused reservation "
        "of its run again under its own limit, as <code>harp train</code>'s net cut counts them; of each job "
        "harp did kill, likewise the run it lost and its run again (its run time standing in for the "
        "unknown one, as in its waste as asked), so that each costs the net the run it lost. Net: the "
        "waste cut less what the kills lose (below zero, rewriting costs more than it saves).</p>",
        table(head, rows),
        *_image(images, "modes", "reserved and wasted core-hours per mode"),
        *_other_targets(report),
    ]


def _other_targets(report: SiteReport) -> list[str]:
    if not report.other_targets:
        return []
    rows = [
        (
            t.target.value,
            f"{t.jobs:,}",
            percent(t.lowered_pct),
            percent(t.waste_cut_pct),
            percent(t.harmed_pct),
            "-" if t.at_limit_pct is None else percent(t.at_limit_pct),
        )
        for t in report.other_targets
    ]
    head = ("target", "jobs", "lowered", "waste cut", "killed out of memory / slowed",
            "at harp's CPU limit (possibly slowed)")  # fmt: skip
    return [
        "<p>Rewrite mode also lowers memory and CPUs (the other modes change only the time limit). Waste: "
        "MB-hours reserved but unused (memory), cores allocated but idle (CPUs). Killed out of memory: jobs "
        "that peaked under their own memory and would not fit under harp's, plus the jobs harp's lowered "
        "memory did stop. Slowed: jobs that used more CPUs than harp's value would leave them. A job cannot "
        f"use more CPUs than it holds: of the jobs whose CPUs harp did cut, those that used at least "
        f"{AT_LIMIT:.0%} of what it left them are at harp's limit, and may have been slowed by it.</p>",
        table(head, rows),
    ]


def _partitions(report: SiteReport, images: dict[str, str]) -> list[str]:
    rows = [
        (p.partition or "(none)", f"{p.jobs:,}", core_h(p.used_core_h), core_h(p.reserved_core_h),
         core_h(p.waste_core_h[Mode.SHADOW]), core_h(p.waste_core_h[Mode.EXTEND]),
         core_h(p.waste_core_h[Mode.REWRITE]), Killed(p.rewrite_killed, p.jobs),
         Killed(p.harp_killed, p.jobs))
        for p in report.by_partition
    ]  # fmt: skip
    head = ("partition", "jobs", "used core-h", "reserved core-h", "waste as asked", "waste in extend",
            "waste in rewrite", "would be killed in rewrite", "killed by harp")  # fmt: skip
    return [
        "<h2>Waste and kills per partition</h2>",
        table(head, rows),
        *_image(images, "partitions", "waste per partition under each mode"),
    ]


def _accuracy(images: dict[str, str]) -> list[str]:
    return [
        "<h2>Predicted vs actual</h2>",
        "<p>Harp's value (its prediction, or the limit it set) and the user's request against the run "
        "time. A point below the line is a limit shorter than the run: in rewrite mode, a kill.</p>",
        *_image(images, "scatter", "harp's value and the request against the run time"),
        "<h2>Actual / predicted</h2>",
        "<p>Right of 1 the job ran longer (used more) than harp's value; the further left, the more a "
        "limit at that value would still reserve in vain.</p>",
        *_image(images, "cdf", "cumulative distribution of actual over predicted"),
    ]


def _notes(report: SiteReport) -> list[str]:
    floor = report.policy.floors
    return [
        "<h2>How to read it</h2><ul>",
        "<li>A shadow tag holds the limit harp would have set. The policy's floors and min_gain are "
        f"applied to it as the daemon applies them (time floor {floor.get(Target.TIME, 0):g} min, min_gain "
        f"{report.policy.min_gain:g}).</li>",
        "<li>A shadow value marked /k is one the calibrated rule (or a cold user) would have left as "
        "asked: it keeps the request here. Tags from before that mark count as limits, which "
        "overstates the cut and the kills for such jobs.</li>",
        "<li>time_min saves in the schedule, not in reservations: backfill may start the jobs it changes "
        "early. <code>harp simulate</code> measures waits under each mode.</li>",
        "<li>The same figures over the last days are in Prometheus (harp_outcome_*), and "
        "<code>harp explain JOBID</code> details one job.</li></ul>",
    ]


@dataclass(frozen=True)
class Killed:
    """A count of killed jobs out of ``of``: shown in red when not zero."""

    count: int
    of: int


def table(head: Sequence[str], rows: Sequence[Sequence[object]], align_numbers: bool = True) -> str:
    """An HTML table; every cell is escaped, numbers right-aligned when ``align_numbers``."""
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(_cell(c, align_numbers) for c in row) + "</tr>")
    return "\n".join([*out, "</table>"])


def _cell(value: object, align_numbers: bool) -> str:
    if isinstance(value, Killed):
        share = f" ({100.0 * value.count / value.of:.2f} %)" if value.count and value.of else ""
        return f'<td class="n{" kills" if value.count else ""}">{value.count:,}{share}</td>'
    text = str(value)
    numeric = align_numbers and NUMBER.match(text) is not None
    return f'<td class="n">{escape(text)}</td>' if numeric else f"<td>{escape(text)}</td>"


def _image(images: dict[str, str], name: str, alt: str) -> list[str]:
    return [f'<p><img src="{escape(images[name])}" alt="{escape(alt)}"></p>'] if name in images else []


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name}: {n:,}" for name, n in counts.items()) or "none"


def _policy(report: SiteReport) -> str:
    return f"time floor {report.policy.floors.get(Target.TIME, 0):g} min, min_gain {report.policy.min_gain:g}"


def when(at: int | None) -> str:
    return "-" if at is None else utc_text(at, "%Y-%m-%d %H:%M UTC")


def core_h(value: float) -> str:
    return f"{value:,.0f}"


def percent(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f} %"
