"""Fit each strategy on the past, score it on the test window: the figures behind `harp evaluate`.

Strategies are fitted with the full chronological list and the split (they learn on the train
window and choose on validation, by contract); their limits for the validation and test windows
come from one call. Only the test window's figures are reported as results; the validation ones
are kept to show how well each calibration carried over. Nothing is chosen on test.

Optional strategy methods read here: ``pareto(jobs, start)`` (see frontier.Tunable) for the curve,
and ``knob() -> dict[str, float]`` (e.g. {"multiplier": 3.2}), shown in the table and the JSON.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from slurm_harp.core.request import Target
from slurm_harp.evaluation.ceiling import ceilings
from slurm_harp.evaluation.costs import Figures, assess
from slurm_harp.evaluation.frontier import Curve, Tunable
from slurm_harp.evaluation.observed import Observed, observe
from slurm_harp.evaluation.split import Timeline
from slurm_harp.evaluation.strategy import Strategy

log = logging.getLogger(__name__)

MIN_WINDOW_JOBS = 20  # fewer usable jobs in validation or test than this: the target is skipped


@dataclass
class Outcome:
    """One strategy on one target; ``error`` set when it failed to fit or predict."""

    name: str
    test: Figures | None = None
    validation: Figures | None = None
    knob: dict[str, float] = field(default_factory=dict)
    curve: Curve | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class TargetReport:
    target: Target
    usable: dict[str, int]  # jobs with a request and an observed value, per window
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)  # strategy -> why it did not run
    # Per grouping (ceiling.GROUPINGS), the hindsight ceiling on the test window.
    ceiling: dict[str, dict[str, float]] = field(default_factory=dict)


def usable_counts(timeline: Timeline, obs: Observed) -> dict[str, int]:
    use = obs.usable()
    return {name: int(use[a:b].sum()) for name, (a, b) in timeline.windows().items()}


def evaluate_target(
    timeline: Timeline, target: Target, strategies: Sequence[Strategy], kill_budget: float
) -> TargetReport:
    obs = observe(timeline.jobs, target)
    report = TargetReport(target=target, usable=usable_counts(timeline, obs))
    short = {w: n for w, n in report.usable.items() if w != "train" and n < MIN_WINDOW_JOBS}
    if short:
        report.skipped = (
            f"too few jobs with both a {target.value} request and an observed {target.value} "
            f"({', '.join(f'{w}: {n}' for w, n in short.items())}; need {MIN_WINDOW_JOBS})"
        )
        return report
    for strategy in strategies:
        report.outcomes.append(_run(strategy, timeline, obs, kill_budget))
    test = slice(timeline.split.validation_end, None)
    try:
        report.ceiling = ceilings(timeline.jobs[test], obs.take(test), kill_budget)
    except Exception:  # a reference figure: its failure must not lose the strategies' figures
        log.exception("hindsight ceiling failed on %s", target.value)
    return report


def _run(strategy: Strategy, timeline: Timeline, obs: Observed, kill_budget: float) -> Outcome:
    jobs, split = timeline.jobs, timeline.split
    outcome = Outcome(name=strategy.name)
    started = time.monotonic()
    try:
        strategy.fit(jobs, split, kill_budget)
        limits = np.asarray(strategy.limits(jobs, split.train_end), dtype=np.float64)
        if limits.shape != (len(jobs) - split.train_end,):
            raise ValueError(
                f"limits() returned shape {limits.shape}, expected ({len(jobs) - split.train_end},)"
            )
        cut = split.validation_end - split.train_end
        outcome.validation = assess(obs.take(slice(split.train_end, split.validation_end)), limits[:cut])
        outcome.test = assess(obs.take(slice(split.validation_end, None)), limits[cut:])
        knob = getattr(strategy, "knob", None)
        if callable(knob):
            outcome.knob = {str(k): float(v) for k, v in knob().items()}
        if isinstance(strategy, Tunable):
            outcome.curve = [(float(k), float(w)) for k, w in strategy.pareto(jobs, split.validation_end)]
    except Exception as exc:  # one broken strategy must not hide the others' figures
        log.exception("strategy %s failed on %s", strategy.name, obs.target.value)
        outcome.error = f"{type(exc).__name__}: {exc}"
    outcome.seconds = time.monotonic() - started
    log.info("%s / %s: %.1f s", obs.target.value, strategy.name, outcome.seconds)
    return outcome
