"""The Pareto figure of `harp evaluate`'s report: waste cut against newly killed (slowed, for CPUs)
on the test window, one panel per target, each strategy's curve and chosen setting, as a PNG."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurm_harp.core.request import Target
from slurm_harp.evaluation.report import Context
from slurm_harp.evaluation.runner import TargetReport
from slurm_harp.output_dir import png_of
from slurm_harp.plot_text import plain


def draw(reports: Sequence[TargetReport], ctx: Context) -> bytes | None:
    """Waste cut vs newly killed on the test window, one panel per target, as a PNG drawn in
    memory, before any file of the run is written; None if nothing to draw."""
    shown = [r for r in reports if not r.skipped and any(o.test for o in r.outcomes)]
    if not shown:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown), 5), squeeze=False)
    for ax, report in zip(axes[0], shown, strict=True):
        lost_key = "slowed_pct" if report.target is Target.CPUS else "newly_killed_pct"
        for i, outcome in enumerate(o for o in report.outcomes if o.test):
            color = f"C{i % 10}"
            if outcome.curve:
                xs, ys = zip(*outcome.curve, strict=True)
                ax.plot(xs, ys, color=color, lw=1.2, alpha=0.8)
            test = outcome.test or {}
            x, y = test.get(lost_key), test.get("waste_cut_pct")
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y):
                ax.plot([x], [y], "o", color=color, label=outcome.name)
        ax.axvline(100 * ctx.kill_budget, color="grey", ls="--", lw=0.8, label="kill budget")
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlim(0, 100)
        ax.set_ylim(-5, 100)
        ax.set_xlabel("slowed jobs %" if report.target is Target.CPUS else "newly killed jobs %")
        ax.set_ylabel("reservation waste cut %")
        ax.set_title(f"{plain(ctx.trace)}: {report.target.value} (test, {report.usable['test']} jobs)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    png = png_of(fig)
    plt.close(fig)
    return png
