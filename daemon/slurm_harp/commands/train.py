"""`harp train`: accounting (a file or live sacct) -> validated ONNX quantile models -> model store."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from slurm_harp.accounting import JobRecord, ReadStats, harvest_sacct, load_records
from slurm_harp.core.request import Target

log = logging.getLogger(__name__)

SACCT_TIMEOUT_S = 600.0


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
    p.add_argument("--target", default=Target.TIME.value, choices=[t.value for t in Target])
    p.add_argument("--quantiles", default="0.5,0.9,0.95", type=_quantiles, help="default: %(default)s")
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
    if args.target != Target.TIME.value:
        log.error(
            "target %s is not modelled yet (only time); the daemon answers 'no model' for it", args.target
        )
        return 2
    if args.source != "sacct" and not Path(args.source).is_file():
        log.error("source %s: no such file", args.source)
        return 2
    # Imported here so that the daemon's own commands work without the training extra installed.
    from slurm_harp.core.metrics import format_summary
    from slurm_harp.learning.booster import BoosterParams
    from slurm_harp.learning.walltime import TrainingError, train_walltime
    from slurm_harp.model.store import ModelStore

    try:
        records, stats = read_source(args.source, args.sacct_start)
    except (OSError, ValueError, RuntimeError, subprocess.TimeoutExpired) as exc:
        log.error("cannot read %s: %s", args.source, exc)
        return 2
    log.info("%s", stats.summary())
    try:
        result = train_walltime(
            records,
            args.quantiles,
            source=args.source,
            params=BoosterParams(n_jobs=max(1, args.threads)),
            max_rows=args.max_rows,
        )
    except TrainingError as exc:
        log.error("training failed: %s", exc)
        return 1
    store = ModelStore(args.store)
    version = store.publish(Target.TIME, result.files, result.card)
    print(f"published {Target.TIME.value} model {version} in {store.target_dir(Target.TIME)}")
    training = result.card["training"]
    print(f"trained on {training['rows_train']} jobs, validated on {training['rows_validation']}")
    for key, values in result.validation.items():
        label = "request" if key == "request" else f"q{key}"
        shown = {k: v for k, v in values.items() if v is not None}
        print(f"  {label:8} {format_summary(shown)}")
    return 0
