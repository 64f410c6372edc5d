"""`harp train`: accounting (a file or live sacct) -> validated ONNX models + calibrated rule -> store.

For each target asked (``--target all``: every target the data has enough of), the model family
is fitted on the older jobs, one model is chosen and the safety rule calibrated on the most
recent ones (learning.trainer), and a new version is published with its card.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_harp.accounting import JobRecord, ReadStats, harvest_sacct, load_records
from slurm_harp.commands.arguments import fraction
from slurm_harp.core.request import Target

if TYPE_CHECKING:
    from slurm_harp.learning.dataset import Dataset

log = logging.getLogger(__name__)

SACCT_TIMEOUT_S = 600.0
ALL = "all"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("train", help="train a model from accounting data and publish it")
    p.add_argument(
        "--source",
        required=True,
        help="SWF (.swf/.swf.gz), Eagle CSV (.csv), a saved `sacct -P` text file, or `sacct` to query live",
    )
    p.add_argument(
        "--store",
        default=os.environ.get("HARP_STORE"),
        help="model store directory (default: $HARP_STORE)",
    )
    p.add_argument(
        "--target",
        default=Target.TIME.value,
        choices=[*(t.value for t in Target), ALL],
        help="what to model; 'all': each target the data has (default: %(default)s)",
    )
    p.add_argument(
        "--quantiles", default="0.5,0.7,0.8,0.9,0.95,0.98,0.99", type=_quantiles, help="default: %(default)s"
    )
    p.add_argument(
        "--compare",
        default="huber,eloss,linear,tree,mlp",
        type=_names,
        help="comparison models fitted beside the quantile ladder ('none' for none; default: %(default)s)",
    )
    p.add_argument(
        "--select",
        default="upp,ov_mape,1.0",
        type=_selection,
        help="model choice on validation: PRIMARY,SECONDARY,TOLERANCE (metrics of the validation "
        "table; default WTM: lowest UPP, then lowest OV_MAPE among those within 1 point: %(default)s)",
    )
    p.add_argument(
        "--floor",
        type=float,
        default=1.0,
        help="smallest limit the calibrated rule proposes, in the target's unit (default: %(default)s); "
        "the daemon's policy floors apply on top, which only makes its limits safer",
    )
    p.add_argument(
        "--kill-budget",
        type=fraction,
        default=0.01,
        help="fraction of validation jobs the calibrated rule may newly kill (default: %(default)s)",
    )
    p.add_argument("--max-rows", type=int, default=None, help="train on the most recent N jobs only")
    p.add_argument(
        "--threads", type=int, default=1, help="LightGBM threads; more only on idle cores (default: 1)"
    )
    p.add_argument(
        "--sacct-start",
        default="now-90days",
        help="with --source sacct: sacct -S value (default: %(default)s)",
    )
    p.set_defaults(func=run)


def _quantiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or not all(0.0 < q < 1.0 for q in values):
        raise argparse.ArgumentTypeError(f"quantiles must lie in (0, 1): {text!r}")
    return values


def _names(text: str) -> tuple[str, ...]:
    from slurm_harp.learning.family import COMPARISON

    names = tuple(part.strip() for part in text.split(",") if part.strip() and part.strip() != "none")
    unknown = [n for n in names if n not in COMPARISON]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown models {unknown}; known: {', '.join(COMPARISON)}")
    return names


def _selection(text: str) -> tuple[str, str, float]:
    parts = [part.strip() for part in text.split(",")]
    try:
        primary, secondary, tolerance = parts[0], parts[1], float(parts[2]) if len(parts) > 2 else 0.0
    except (IndexError, ValueError):
        raise argparse.ArgumentTypeError(f"expected PRIMARY,SECONDARY[,TOLERANCE]: {text!r}") from None
    from slurm_harp.learning.selection import METRICS

    if primary not in METRICS or secondary not in METRICS or not tolerance >= 0:
        raise argparse.ArgumentTypeError(
            f"expected PRIMARY,SECONDARY[,TOLERANCE >= 0] with metrics among {', '.join(METRICS)}: {text!r}"
        )
    return primary, secondary, tolerance


def subprocess_runner(argv: Sequence[str]) -> str:
    """Run sacct (SLURM_CONF and the rest of the environment are inherited) and return stdout."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=SACCT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr.strip()[:500]}")
    return done.stdout


def read_source(source: str, sacct_start: str) -> tuple[list[JobRecord], ReadStats]:
    if source == "sacct":
        stats = ReadStats(source="sacct")
        return harvest_sacct(subprocess_runner, sacct_start, None, stats), stats
    stats = ReadStats(source=source)
    return load_records(source, stats), stats


def run(args: argparse.Namespace) -> int:
    if not args.store:
        log.error("no model store: give --store or set HARP_STORE")
        return 2
    if args.source != "sacct" and not Path(args.source).is_file():
        log.error("source %s: no such file", args.source)
        return 2
    try:
        records, stats = read_source(args.source, args.sacct_start)
    except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("cannot read %s: %s", args.source, exc)
        return 2
    log.info("%s", stats.summary())
    from slurm_harp.learning.dataset import build_dataset

    targets = list(Target) if args.target == ALL else [Target(args.target)]
    data = build_dataset(records, max_rows=args.max_rows)  # the same features serve every target
    published = 0
    for target in targets:
        code = _train_one(args, records, data, target, quiet_skip=args.target == ALL)
        if code == 0:
            published += 1
        elif args.target != ALL:
            return code
    if not published:
        log.error("training failed: no target had enough data")
        return 1
    return 0


def _train_one(
    args: argparse.Namespace, records: list[JobRecord], data: Dataset, target: Target, quiet_skip: bool
) -> int:
    # Imported here so that the daemon's own commands work without the training extra installed.
    from slurm_harp.core.metrics import format_summary
    from slurm_harp.learning.booster import BoosterParams
    from slurm_harp.learning.calibration import CalibrationConfig
    from slurm_harp.learning.family import FamilyConfig
    from slurm_harp.learning.fitting import MethodConfig
    from slurm_harp.learning.selection import SelectionPolicy
    from slurm_harp.learning.trainer import TrainingError, train_target
    from slurm_harp.model.store import ModelStore

    config = MethodConfig(
        family=FamilyConfig(
            quantiles=args.quantiles, compare=args.compare, params=BoosterParams(n_jobs=max(1, args.threads))
        ),
        selection=SelectionPolicy(*args.select),
        calibration=CalibrationConfig(kill_budget=args.kill_budget, floor=args.floor),
    )
    try:
        result = train_target(records, target, config, source=args.source, max_rows=args.max_rows, data=data)
    except TrainingError as exc:
        if quiet_skip:
            log.warning("%s: not trained: %s", target.value, exc)
        else:
            log.error("training failed: %s", exc)
        return 1
    store = ModelStore(args.store)
    version = store.publish(target, result.files, result.card)
    print(f"published {target.value} model {version} in {store.target_dir(target)}")
    training = result.card["training"]
    print(f"trained on {training['rows_train']} jobs, validated on {training['rows_validation']}")
    for key, values in result.validation.items():
        label = "request" if key == "request" else f"q{key}"
        shown = {k: v for k, v in values.items() if v is not None}
        print(f"  {label:8} {format_summary(shown)}")
    selection = result.card["selection"]
    chosen = selection["chosen"]
    print(f"  chosen by {selection['policy']['name']} on validation: {chosen}")
    rule = result.card["calibration"]
    figures = rule["validation"]
    print(
        f"  safety rule: {len(rule['rungs'])} rungs, cuts {figures['waste_cut_pct']:.1f} % of the "
        f"validation waste at {figures['newly_killed_pct']:.2f} % newly killed "
        f"(budget {100 * rule['kill_budget']:.2f} %)"
    )
    return 0
