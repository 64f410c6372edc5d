"""`harp explain JOBID`: what harp decided for one job and why, for admins.

From the job's own tag (sacct's AdminComment: the mode, the values harp wrote, the user's own
values), the model versions the tag names (their cards in the store: when trained, the calibrated
rule), and the policy in the configuration now. Where the model version is still in the store, the
decision is recomputed the way the daemon made it: the job's features with its user's history at
submit time (from the job store), each rung of the calibrated rule with its candidate limit, risk
and value, and the limit the rule picks.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import subprocess
from pathlib import Path

import numpy as np

from slurm_harp.accounting import sacct_runner
from slurm_harp.accounting.jobstore import JobStore, store_error
from slurm_harp.accounting.sacct_runner import SacctRunner
from slurm_harp.commands.arguments import config_option, settings_at
from slurm_harp.commands.terminal import printable, printable_lines
from slurm_harp.config import Settings
from slurm_harp.core.features import vectorize
from slurm_harp.core.history import HistoryIndex, is_cold
from slurm_harp.core.job import JobRecord
from slurm_harp.core.predictor import closest_quantile, served_rule
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import decision_weight, rung_limit
from slurm_harp.core.tag import Tag, as_submitted, parse_tag
from slurm_harp.evaluation.outcomes import TARGET_OF_KEY
from slurm_harp.model.runtime import ModelError, load_version
from slurm_harp.model.store import ModelStore

UNITS = {Target.TIME: "min", Target.MEMORY: "MB", Target.CPUS: "CPUs"}
DAY_S = 86400


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("explain", help="what harp decided for a job, and why")
    p.add_argument("job_id", help="the job's id (JobIDRaw: an array task's own id)")
    config_option(p, "TOML configuration (the store, the policy, the job store)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_at(args.config)
    if settings is None:
        return 2
    try:
        text = explain(args.job_id, settings, sacct_runner.run_sacct)
    except (OSError, RuntimeError, ValueError) as exc:
        print(printable(f"harp explain: {exc}"))
        return 1
    except subprocess.TimeoutExpired as exc:
        print(f"harp explain: sacct did not answer within {exc.timeout:g} s")
        return 1
    except sqlite3.Error as exc:  # the [history] db's, read for the user's history at submit time
        print(printable(f"harp explain: {store_error(settings.history.db or '', exc)[0]}"))
        return 1
    print(text)
    return 0


def read_job(job_id: str, runner: SacctRunner) -> JobRecord:
    """The job from sacct (pending and running jobs too)."""
    if not job_id.isdigit():
        raise ValueError(f"not a job id: {job_id!r} (give the number sacct shows as JobIDRaw)")
    record = sacct_runner.one_job(runner, job_id)
    if record is None:
        raise ValueError(f"job {job_id}: not in accounting (sacct -j {job_id} shows nothing)")
    return record


def explain(job_id: str, settings: Settings, runner: SacctRunner) -> str:
    """The explanation, every character a user may have chosen (an account, a tag) shown escaped."""
    job = read_job(job_id, runner)
    request = job.request
    lines = [
        f"job {job.job_id}: user {request.user_name}, partition {request.partition}, "
        f"account {request.account}; {job.state}, ran {_minutes(job.elapsed_s / 60)}, "
        f"limit now {_minutes(request.time_limit_minutes)}"
    ]
    tag = parse_tag(job.harp_tag)
    if tag is None:
        lines.append("no harp tag: harp did not see this job (switched off, daemon down, or opted out)")
        return printable_lines(lines + _policy_now(job, settings))
    lines.append(f"tag: {job.harp_tag}")
    lines += _what_was_done(tag)
    job = as_submitted(job)
    store = ModelStore(settings.store)
    for key in tag.values:
        target = TARGET_OF_KEY[key]
        version = next((v for v in tag.versions if v in store.versions(target)), None)
        if version is None:
            lines.append(
                f"{target.value} model: {', '.join(tag.versions) or 'none named'} is not in {store.root}"
            )
            continue
        lines += _recompute(job, target, store.target_dir(target) / version, store, settings)
    return printable_lines(lines + _policy_now(job, settings))


def _what_was_done(tag: Tag) -> list[str]:
    out = [f"mode {tag.mode}:"]
    for key, value in tag.values.items():
        target = TARGET_OF_KEY[key]
        unit, own = UNITS[target], tag.own.get(key)
        asked = f" from the user's {own} {unit}" if own is not None else ""
        flag = tag.flags.get(key, "")
        if flag == "!":
            what = f"lowered to {value} {unit}{asked}"
            if tag.extendable_minutes is not None and target is Target.TIME:
                what += f"; harp guard extends it up to {tag.extendable_minutes} min if the job needs it"
        elif flag == "~":
            what = f"time_min set to {value} {unit}{asked}: backfill may start it with that limit"
        else:
            what = f"predicted {value} {unit}, nothing changed"
        out.append(f"  {target.value}: {what}")
    return out


def _recompute(
    job: JobRecord, target: Target, version_dir: Path, store: ModelStore, settings: Settings
) -> list[str]:
    try:
        model = load_version(version_dir, target)  # as the daemon loads it: no link followed
    except ModelError as exc:
        return [f"{target.value} model {version_dir.name}: does not load now: {exc}"]
    serving = store.current(target).names == version_dir.name  # a CURRENT that does not read: not this
    card = model.card
    out = [
        f"{target.value} model {model.version}: trained {card.get('created', '?')}, "
        f"{'serving now' if serving else 'no longer serving'}"
    ]
    request = job.request
    history, cold = _history_row(job, settings)
    x = vectorize([request], None if history is None else history[np.newaxis, :])
    asked = request.requested(target)
    calibration = served_rule(model, settings.policy)
    if calibration is not None and asked:
        weight = decision_weight(target, request)
        predictions = {n: float(v[0]) for n, v in model.predict_named(x, calibration.models).items()}
        out.append(
            f"  calibrated rule (penalty {calibration.penalty:.4g}, floor {calibration.floor:g}): "
            f"candidate limits for this job, value = {weight:g} x (request - limit) - penalty x risk"
        )
        out.append("    rung  model            margin  risk    prediction   limit      value")
        risks = calibration.risks(request.partition)
        best: tuple[float, float] | None = None
        for i, (rung, risk) in enumerate(zip(calibration.rungs, risks, strict=True), 1):
            predicted = predictions.get(rung.model, math.nan)
            if not math.isfinite(predicted):
                out.append(f"    {i:<5} {rung.model:<16} {rung.margin:<7.3g} {risk:<7.3g} none")
                continue
            limit = rung_limit(rung.margin, predicted, calibration.floor, asked)
            value = weight * (asked - limit) - calibration.penalty * risk
            out.append(
                f"    {i:<5} {rung.model:<16} {rung.margin:<7.3g} {risk:<7.3g} {predicted:<12.4g} "
                f"{limit:<10g} {value:.4g}"
            )
            if value > 0 and (best is None or value > best[0] or (value == best[0] and limit > best[1])):
                best = (value, float(limit))
        out.append(
            f"  the rule picks {best[1]:g} {UNITS[target]}"
            if best and best[1] < asked
            else "  the rule keeps the request (no candidate's saving outweighs its risk)"
        )
    else:
        quantile = closest_quantile(model.quantiles, settings.policy.quantile)
        predicted = float(model.predict_quantile(x, quantile)[0])
        out.append(f"  q{quantile:g} prediction for this job: {predicted:.4g} {UNITS[target]}")
    if history is None:
        out.append("  (no [history] db configured: history features unknown, as the daemon had them)")
    elif cold and settings.policy.require_history:
        out.append("  the user had no job ended in the history window: cold, annotated only")
    return out


def _history_row(job: JobRecord, settings: Settings) -> tuple[np.ndarray | None, bool]:
    """The user's history at submit time from the job store, as the daemon's feed held it."""
    db, submit = settings.history.db, job.request.submit_time
    if db is None or submit is None or not Path(db).exists():
        return None, False
    window = settings.history.window_days * DAY_S
    index = HistoryIndex()
    itself = (job.job_id, submit)  # an id alone may name an older job too (ids given again)
    with JobStore(db, readonly=True) as store:
        known = [
            r for r in store.records(since=submit - 2 * window)
            if r.end_time is not None and submit - window <= r.end_time <= submit
            and (r.job_id, r.request.submit_time) != itself
        ]  # fmt: skip
    for record in sorted(known, key=lambda r: r.end_time or 0):
        index.add(record)
    row = index.row(job.request, submit)
    return row, is_cold(row)


def _policy_now(job: JobRecord, settings: Settings) -> list[str]:
    policy = settings.policy
    request = job.request
    if policy.opted_out(request):
        return [f"policy now: {request.user_name} or {request.account} is opted out (policy.opt_out_*)"]
    floors = json.dumps({t.value: v for t, v in policy.floors.items()})
    return [
        f"policy now: mode {policy.mode_for(request).value} for partition {request.partition}, "
        f"account {request.account}; limits {policy.limits}, quantile {policy.quantile:g}, floors {floors}"
    ]


def _minutes(value: float | None) -> str:
    if value is None:
        return "none"
    whole = round(value)
    return f"{whole // 60}:{whole % 60:02d} h" if whole >= 60 else f"{value:.1f} min"
