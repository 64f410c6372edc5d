"""The plots of `harp report` (evaluation.site_report's figures), drawn as PNG for the files beside
the page."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from slurm_harp.core.policy import Mode
from slurm_harp.evaluation.site_report import SiteReport
from slurm_harp.output_dir import png_of
from slurm_harp.plot_text import plain

log = logging.getLogger(__name__)
# A scatter of a million jobs says no more than one of this many, and takes far longer to draw.
MAX_POINTS = 20_000
MAX_PARTITIONS = 15  # the ones with the most waste as asked; the table has them all
# Waste under each mode: the request grey as in the scatter, harp's limits in blues.
WASTE_MODES = {Mode.SHADOW: ("as asked", "#bbbbbb"), Mode.EXTEND: ("extend", "#6a9fd4"),
               Mode.REWRITE: ("rewrite", "#1f5fa8")}  # fmt: skip


class DrawError(Exception):
    """A plot matplotlib could not draw (figures it cannot place, a size it cannot render): names
    the file, for a one-line message."""


# Each plot's file: every one a page of the report may show, so a later run removes them all.
PLOT_FILES = {
    "modes": "modes.png",
    "partitions": "partitions.png",
    "scatter": "predicted-vs-actual.png",
    "cdf": "ratio-cdf.png",
}


def draw_all(report: SiteReport) -> dict[str, tuple[str, bytes]]:
    """The plots the figures allow, drawn as PNG in memory: name -> (file name, PNG); none without
    timed jobs. ImportError without matplotlib, DrawError naming the plot that could not be drawn;
    either before any file of the page is touched."""
    if report.timed == 0:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = {"modes": _modes, "partitions": _partitions, "scatter": _scatter, "cdf": _cdf}
    drawn = {}
    for name, draw in plots.items():
        filename = PLOT_FILES[name]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        try:
            draw(report, ax)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            drawn[name] = (filename, png_of(fig))
        except (ValueError, ArithmeticError, RuntimeError) as exc:
            log.debug("drawing %s", filename, exc_info=True)  # the traceback, for a bug report
            raise DrawError(f"cannot draw {filename}: {exc}") from exc
        finally:
            plt.close(fig)
    return drawn


def _modes(report: SiteReport, ax: Any) -> None:
    rows = report.modes
    at = np.arange(len(rows))
    ax.bar(
        at - 0.2, [r.reserved_core_h for r in rows], 0.4, label="reserved (limit x cores)", color="#9db4d3"
    )
    ax.bar(at + 0.2, [r.waste_core_h for r in rows], 0.4, label="waste (reserved, unused)", color="#d9822b")
    for i, row in enumerate(rows):
        ax.annotate(
            f"{row.killed} killed",
            (i + 0.2, row.waste_core_h),
            ha="center",
            va="bottom",
            fontsize=8,
            color="#b00020" if row.killed else "#444444",
        )
    ax.set_xticks(at, [r.mode.value if r.mode is not Mode.SHADOW else "off / shadow" for r in rows])
    ax.set_ylabel("core-hours")
    ax.set_title(f"Time limits of {report.timed:,} jobs under each mode")
    ax.legend(fontsize=8)


def _partitions(report: SiteReport, ax: Any) -> None:
    rows = sorted(report.by_partition, key=lambda r: -r.waste_core_h[Mode.SHADOW])[:MAX_PARTITIONS][::-1]
    at = np.arange(len(rows))
    height = 0.8 / len(WASTE_MODES)
    for k, (mode, (label, colour)) in enumerate(WASTE_MODES.items()):  # as asked on top
        ax.barh(
            at + (1 - k) * height, [r.waste_core_h[mode] for r in rows], height, label=label, color=colour
        )
    for i, row in enumerate(rows):
        if row.rewrite_killed or row.harp_killed:
            ax.annotate(
                f" {row.rewrite_killed} killed in rewrite"
                + (f", {row.harp_killed} by harp" if row.harp_killed else ""),
                (row.waste_core_h[Mode.REWRITE], i - height),
                va="center",
                fontsize=7,
                color="#b00020",
            )
    ax.set_yticks(at, [plain(r.partition or "(none)") for r in rows])
    ax.set_xlabel("waste: core-hours reserved but unused by the jobs that finish")
    more = len(report.by_partition) - len(rows)
    ax.set_title(
        "Waste per partition" + (f" (the {len(rows)} largest of {len(rows) + more})" if more else "")
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # clear of the bars' labels


def _scatter(report: SiteReport, ax: Any) -> None:
    points = report.points
    index = np.arange(len(points.actual))
    if len(index) > MAX_POINTS:  # a fixed seed: the same store gives the same picture
        index = np.sort(np.random.default_rng(0).choice(index, MAX_POINTS, replace=False))
    actual, stopped = points.actual[index], points.stopped[index]
    for values, label, color in (
        (points.requested[index], "user's request", "#bbbbbb"),
        (np.maximum(points.predicted[index], 1.0), "harp's value", "#1f5fa8"),
    ):
        ax.scatter(actual[~stopped], values[~stopped], s=4, alpha=0.4, color=color, label=label, lw=0)
        ax.scatter(actual[stopped], values[stopped], s=12, alpha=0.6, color=color, marker="x", lw=0.8)
    low = max(min(float(np.min(actual)), 1.0), 1 / 60)
    high = float(max(np.max(actual), np.max(points.requested[index])))
    ax.plot([low, high], [low, high], color="black", lw=0.8, label="limit = run time")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("run time (minutes, log scale; x: stopped at a limit)")
    ax.set_ylabel("time limit (minutes, log scale)")
    sampled = f", {len(index):,} of {len(points.actual):,} drawn" if len(index) < len(points.actual) else ""
    ax.set_title(f"Predicted vs actual run time{sampled}: below the line a limit kills")
    ax.legend(fontsize=8, markerscale=3)


def _cdf(report: SiteReport, ax: Any) -> None:
    points = report.points
    series = [
        (points.actual / np.maximum(points.predicted, 1.0), "time: run / harp's value"),
        (points.actual / points.requested, "time: run / user's request"),
    ]
    if len(report.memory_ratios):
        series.append((report.memory_ratios, "memory: peak / harp's value"))
    for ratios, label in series:
        values = np.sort(ratios)
        ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=label)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("actual / predicted (log scale; right of 1: the job needed more)")
    ax.set_ylabel("fraction of jobs at most that")
    ax.set_title("CDF of actual / predicted")
    ax.legend(fontsize=8)
