"""Shared set-up for the studies: a shared trace split as `harp evaluate` splits it, and the
studies' command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_harp.core.request import Target
from tests.conftest import SHARED_TRACES

if TYPE_CHECKING:
    from slurm_harp.evaluation.split import Timeline


def shared_timeline(trace: str) -> tuple[Path, Timeline]:
    """The shared trace whose name starts with ``trace`` (e.g. "KTH"), split as `harp evaluate` does."""
    from slurm_harp.accounting import load_records
    from slurm_harp.evaluation.split import chronological_split

    path = next(iter(sorted(SHARED_TRACES.glob(f"{trace}*"))))
    return path, chronological_split(load_records(path))


def study_parser(doc: str, traces: str) -> argparse.ArgumentParser:
    """A study's command line: ``--traces`` (shared traces' name prefixes, comma-separated;
    ``traces`` by default) and ``--target``; a study adds its own options."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=traces)
    parser.add_argument("--target", default="time", choices=[t.value for t in Target])
    return parser


def per_trace(doc: str, study: Callable[[str, Target], None], traces: str) -> None:
    """``study(trace, target)`` for each of ``--traces`` and ``--target`` (study_parser)."""
    args = study_parser(doc, traces).parse_args()
    for trace in args.traces.split(","):
        study(trace, Target(args.target))
