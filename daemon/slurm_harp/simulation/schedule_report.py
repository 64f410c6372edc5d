"""A set of runs on one trace as a Markdown table, a JSON document and two plots: the wait-time
CDF and the mean bounded slowdown per job-size class."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slurm_harp.output_dir import png_of
from slurm_harp.plot_text import plain
from slurm_harp.simulation.engine import Result
from slurm_harp.simulation.schedule_metrics import WARMUP, Metrics, waits


@dataclass(frozen=True)
class Run:
    result: Result
    metrics: Metrics

    @property
    def label(self) -> str:
        return f"{self.result.scheduler} / {self.result.limits}"


COLUMNS = (
    "scheduler",
    "limits",
    "mean wait h",
    "median wait h",
    "mean bsld",
    "util %",
    "killed early",
    "lost core-h",
    "re-run core-h",
    "limit raises",
    "delayed resv",
    "mean delay min",
    "sim s",
)


def table(runs: Sequence[Run], command: str | None = None) -> str:
    """Markdown: one row per run, and the trace, size and warm-up above it."""
    if not runs:
        return "no runs\n"
    w = runs[0].result.workload
    m0 = runs[0].metrics
    lines = [
        f"## {w.name}: {len(w)} jobs on {w.processors} processors",
        "",
        f"Measured: {m0.jobs} jobs after {m0.warmup_jobs} warm-up jobs. Bounded slowdown with tau = 10 s; "
        "utilisation from the first measured submission to the last submission.",
        *([f"Made by: `{command}`"] if command else []),
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for run in runs:
        m = run.metrics
        cells = [
            run.result.scheduler,
            run.result.limits,
            f"{m.mean_wait_s / 3600:.2f}",
            f"{m.median_wait_s / 3600:.2f}",
            f"{m.mean_bsld:.2f}",
            f"{100 * m.utilisation:.1f}",
            str(m.killed_early_jobs),
            f"{m.lost_core_hours:,.0f}",
            f"{m.rerun_core_hours:,.0f}",
            str(m.extensions),
            str(m.delaying_extensions),
            f"{m.mean_delay_s / 60:.1f}",
            f"{run.result.seconds:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "killed early: jobs killed before their user's own limit (run again with it); limit raises: "
        "planned limits raised as a job reached them (Tsafrir's corrections) or came within the "
        "guard's lead of them (its extensions); delayed resv: raises that pushed back the first "
        "waiting job's reservation.",
    ]
    return "\n".join(lines) + "\n"


def document_json(runs: Sequence[Run], command: str | None = None) -> str:
    """``document`` as strict JSON: a metric that is not a finite number (the utilisation of a
    window of no length, NaN) is null, never NaN or Infinity, which JSON does not have."""
    return json.dumps(finite(document(runs, command)), indent=1, allow_nan=False) + "\n"


def finite(value: object) -> object:
    """``value`` with every float that is not finite, at any depth, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def document(runs: Sequence[Run], command: str | None = None) -> dict[str, object]:
    w = runs[0].result.workload if runs else None
    return {
        "trace": w.name if w is not None else None,
        "jobs": len(w) if w is not None else 0,
        "processors": w.processors if w is not None else None,
        "dropped": dict(w.dropped) if w is not None else {},
        "command": command,
        "runs": [
            {
                "scheduler": r.result.scheduler,
                "limits": r.result.limits,
                "seconds": round(r.result.seconds, 3),
                **r.metrics.as_dict(),
            }
            for r in runs
        ],
    }


def draw(runs: Sequence[Run], stem: str, warmup: float = WARMUP) -> dict[str, bytes]:
    """``stem``-waits.png and ``stem``-bsld.png drawn in memory, before any file of the run is
    written: file name -> PNG."""
    if not runs:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = runs[0].result.workload.name
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        wait = np.sort(waits(run.result, warmup)) / 3600
        # Waits of 0 cannot sit on a log axis: draw them at 1 s.
        share = np.arange(1, len(wait) + 1) / len(wait)
        ax.step(np.maximum(wait, 1 / 3600), share, where="post", label=plain(run.label))
    ax.set_xscale("log")
    ax.set_xlabel("wait (hours, log scale; no wait drawn at 1 s)")
    ax.set_ylabel("fraction of jobs waiting at most that")
    ax.set_title(f"{plain(trace)}: wait-time CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    cdf = png_of(fig)
    plt.close(fig)

    classes = list(dict.fromkeys(c for run in runs for c in run.metrics.bsld_by_size))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        values = [run.metrics.bsld_by_size.get(c, (0, 0.0))[1] for c in classes]
        ax.bar(np.arange(len(classes)) + k * width - 0.4 + width / 2, values, width, label=plain(run.label))
    counts = [max(run.metrics.bsld_by_size.get(c, (0, 0.0))[0] for run in runs) for c in classes]
    ax.set_xticks(np.arange(len(classes)), [f"{c}\n({n} jobs)" for c, n in zip(classes, counts, strict=True)])
    ax.set_xlabel("job size (processors)")
    ax.set_ylabel("mean bounded slowdown (tau = 10 s)")
    ax.set_title(f"{plain(trace)}: bounded slowdown by job size")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    bsld = png_of(fig)
    plt.close(fig)
    return {f"{stem}-waits.png": cdf, f"{stem}-bsld.png": bsld}
