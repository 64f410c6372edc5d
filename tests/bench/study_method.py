"""Study: variants of ours that were tried and not adopted, against the default, on the shared traces.

    .venv/bin/python -m tests.bench.study_method [--traces KTH,SDSC,CTC,LANL] [--target time]
        [--variants default,leaves63,min-child10,request-rungs,burst,request-history]

`harp evaluate`'s protocol (60 / 20 / 20 chronological split, 1 % budget held in each of the four parts
of the validation window, refit when the test window opens). Variants:
- default: ours as shipped;
- leaves63 / min-child10: every booster with 63 leaves (LightGBM's default 31) / at least 10 jobs per
  leaf (20);
- request-rungs: the default models, with three more rungs at 0.5, 0.7 and 0.85 of the request;
- burst: four submission-burst features appended to every row (seconds since the same user+name's
  previous submission, the user's and the user+name's submissions in the past hour, the user's jobs
  submitted and not yet ended), all known at submit time;
- request-history: six columns appended to every row, the history of the same user AND the same
  requested time limit (jobs ended at or before the submit, within the 30-day horizon, as
  core/history.py's keys): log jobs, log last, median and max run, the fraction that hit a limit,
  and log(limit / max run). On SWF traces without job names the request is what tells a user's job
  types apart (the ceiling per user + name + request is far above the one per user).
Prints, per variant, waste cut % / newly killed % (CPUs: slowed %) on validation and test, and the
largest test cut with at most 1 % killed as the rule's penalty sweeps (in hindsight, as the reports'
frontier table). docs/evaluation/tried.md quotes these figures.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.core.history import user_key
from slurm_harp.core.key_history import KeyHistory, horizon_start, log_count, outcome_of, rounded
from slurm_harp.core.request import Target
from slurm_harp.evaluation.frontier import best_cut
from slurm_harp.evaluation.runner import evaluate_target
from slurm_harp.evaluation.split import Timeline
from slurm_harp.learning import calibration as cal
from slurm_harp.learning import dataset, strategy
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.learning.strategy import HarpStrategy
from slurm_harp.learning.targets import TargetData
from slurm_harp.model.decision import ladder_limits
from tests.bench.common import fitted_ours, shared_timeline, study_parser

BUDGET = cal.CalibrationConfig().kill_budget
REQUEST_MARGINS = (0.5, 0.7, 0.85)
Figures = tuple[float, float, float, float, float]  # validation cut, kill; test cut, kill; hindsight


def booster_variant(**params: int) -> MethodConfig:
    base = MethodConfig()
    family = replace(base.family, params=replace(base.family.params, **params))
    return replace(base, family=family)


def evaluated(timeline: Timeline, target: Target, config: MethodConfig) -> Figures:
    """Ours with ``config`` under `harp evaluate`'s protocol."""
    outcome = evaluate_target(timeline, target, [HarpStrategy(target, config=config)], BUDGET).outcomes[0]
    if outcome.error or outcome.validation is None or outcome.test is None:
        raise RuntimeError(f"ours failed: {outcome.error}")
    lost = "slowed_pct" if target is Target.CPUS else "newly_killed_pct"
    hindsight = best_cut(outcome.curve or [], 100 * BUDGET)
    return (
        float(outcome.validation["waste_cut_pct"] or 0.0),
        float(outcome.validation[lost] or 0.0),
        float(outcome.test["waste_cut_pct"] or 0.0),
        float(outcome.test[lost] or 0.0),
        math.nan if hindsight is None else hindsight,
    )


def figures_header(path: Path, target: Target) -> str:
    """The line above a trace's figures_line rows."""
    return f"{path.name}, {target.value}: validation / test, cut % / killed %; test ≤ 1 % in hindsight"


def figures_line(label: str, f: Figures) -> str:
    """One printed row of a study: ``label`` and its figures."""
    return (
        f"  {label:14} validation {f[0]:5.1f} / {f[1]:.2f}   test {f[2]:5.1f} / {f[3]:.2f}"
        f"   hindsight {f[4]:5.1f}"
    )


def request_rungs(timeline: Timeline, target: Target) -> Figures:
    """The default models, with rungs at fractions of the request beside theirs."""
    rungs, val, test = fitted_ours(timeline, target, BUDGET)
    rungs += [("request", m) for m in REQUEST_MARGINS]
    val_preds = dict(val.predictions, request=val.td.requested)
    test_preds = dict(test.predictions, request=test.td.requested)
    return scored(rungs, val_preds, val.td, test_preds, test.td)


def scored(
    rungs: list[tuple[str, float]],
    val_preds: dict[str, np.ndarray],
    val: TargetData,
    test_preds: dict[str, np.ndarray],
    test: TargetData,
) -> Figures:
    """The rule calibrated on the validation predictions, scored on the test window's."""
    rule, figures = cal.calibrate(val_preds, val, rungs, cal.CalibrationConfig(kill_budget=BUDGET))
    limits = ladder_limits(test_preds, test.requested, test.weight, rule, test.group)
    kill, cut = cal.assess(limits if rule.rungs else np.full(len(test), np.nan), test)
    hindsight = best_cut(cal.frontier(test_preds, test, rule), 100 * BUDGET) if rule.rungs else 0.0
    # calibrate() names the CPUs' slowed rate newly_killed_pct too
    return figures["waste_cut_pct"], figures["newly_killed_pct"], cut, kill, hindsight or math.nan


def burst_columns(usable: Sequence[JobRecord]) -> np.ndarray:
    """(n, 4) submission-burst features of records in submit order, each from earlier submissions
    (and, for the last one, the end times of the user's earlier jobs, as history features are)."""
    out = np.full((len(usable), 4), np.nan, dtype=np.float32)
    last_submit: dict[tuple[str, str], float] = {}
    by_user: defaultdict[str, deque[float]] = defaultdict(deque)
    by_name: defaultdict[tuple[str, str], deque[float]] = defaultdict(deque)
    running: defaultdict[str, list[float]] = defaultdict(list)  # end times of submitted jobs
    for i, record in enumerate(usable):
        t = record.request.submit_time
        if t is None:
            continue
        user = user_key(record.request) or ""
        name = (user, record.request.job_name or "")
        if name in last_submit:
            out[i, 0] = math.log1p(max(0.0, t - last_submit[name]))
        last_submit[name] = t
        for column, recent in ((1, by_user[user]), (2, by_name[name])):
            while recent and recent[0] < t - 3600:
                recent.popleft()
            out[i, column] = math.log1p(len(recent))
            recent.append(t)
        ends = running[user] = [end for end in running[user] if end > t]
        out[i, 3] = math.log1p(len(ends))
        if record.end_time is not None:
            ends.append(record.end_time)
    return out


def request_history_columns(usable: Sequence[JobRecord]) -> np.ndarray:
    """(n, 6) history of the same user + requested time limit, of records in submit order: each
    row from the jobs that ended at or before its submit time (KeyHistory, as the product's keys)."""
    out = np.full((len(usable), 6), np.nan, dtype=np.float32)
    keys: dict[tuple[str, int], KeyHistory] = {}

    def key(record: JobRecord) -> tuple[str, int] | None:
        user, limit = user_key(record.request), record.request.time_limit_minutes
        return None if user is None or limit is None else (user, limit)

    by_end = sorted((r for r in usable if r.end_time is not None), key=lambda r: r.end_time or 0)
    pending = 0
    for i, record in enumerate(usable):
        at = record.request.submit_time
        if at is None:
            continue
        while pending < len(by_end) and (by_end[pending].end_time or 0) <= at:
            ended, outcome = by_end[pending], outcome_of(by_end[pending])
            pending += 1
            name = key(ended)
            if name is not None and outcome is not None:
                keys.setdefault(name, KeyHistory()).add(outcome)
        name = key(record)
        if name is None:
            continue
        history = keys.get(name)
        count, s = (0, None) if history is None else history.values(at, horizon_start(at))
        out[i, 0] = log_count(count)
        if s is not None:
            headroom = rounded(math.log1p(name[1] * 60.0) - s[3])  # on the history's grid
            out[i, 1:] = (s[0], s[2], s[3], s[6], headroom)
    return out


@contextmanager
def appended_columns(columns: Callable[[Sequence[JobRecord]], np.ndarray]) -> Iterator[None]:
    """HarpStrategy's datasets with ``columns`` of their usable records appended, for the duration."""
    plain = dataset.build_dataset  # what learning.strategy imported

    def build(records: Sequence[JobRecord], max_rows: int | None = None) -> dataset.Dataset:
        data = plain(records, max_rows)
        usable = sorted(
            (r for r in records if r.elapsed_s > 0),
            key=lambda r: -math.inf if r.request.submit_time is None else r.request.submit_time,
        )
        extra = columns(usable)[-len(data) :]
        return replace(data, x=np.hstack([data.x, extra]))

    setattr(strategy, "build_dataset", build)  # noqa: B010 (a study's hook into a private import)
    try:
        yield
    finally:
        setattr(strategy, "build_dataset", plain)  # noqa: B010


def with_bursts(timeline: Timeline, target: Target) -> Figures:
    with appended_columns(burst_columns):
        return evaluated(timeline, target, MethodConfig())


def with_request_history(timeline: Timeline, target: Target) -> Figures:
    with appended_columns(request_history_columns):
        return evaluated(timeline, target, MethodConfig())


VARIANTS: dict[str, Callable[[Timeline, Target], Figures]] = {
    "default": lambda tl, t: evaluated(tl, t, MethodConfig()),
    "leaves63": lambda tl, t: evaluated(tl, t, booster_variant(num_leaves=63)),
    "min-child10": lambda tl, t: evaluated(tl, t, booster_variant(min_child_samples=10)),
    "request-rungs": request_rungs,
    "burst": with_bursts,
    "request-history": with_request_history,
}


def main() -> None:
    parser = study_parser(__doc__ or "", "KTH,SDSC,CTC,LANL")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    names = args.variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    target = Target(args.target)
    for trace in args.traces.split(","):
        path, timeline = shared_timeline(trace)
        print(figures_header(path, target))
        for name in names:
            print(figures_line(name, VARIANTS[name](timeline, target)), flush=True)


if __name__ == "__main__":
    main()
