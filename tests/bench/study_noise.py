"""Study: how far apart equally good runs of ours land, the yardstick for reading a variant's gain.

    .venv/bin/python -m tests.bench.study_noise [--traces KTH,SDSC,CTC,LANL] [--target time] [--salts 5]
        [--variant default] [--ensemble]

The categorical columns (user, account, partition, QoS, job name, working directory, script signature)
hash their values with CRC-32 into [0, 1) (core/features.py). Which number a user gets carries no
meaning, but it decides which users a tree split can put together, so every salt gives a model of the
same information and the same quality, split differently. Salt 0 is the shipped hash; salt k > 0 hashes
"k:" + value. Each salt runs `harp evaluate`'s protocol for ours (study_method's `evaluated`), and the
study prints per salt, then the spread and the mean: validation cut % / killed %, test cut % / killed %
(CPUs: slowed %), and the largest test cut with at most 1 % killed in hindsight. A variant whose
validation gain is inside this spread has not shown it is better; ``--variant`` (one of study_method's)
runs a variant under every salt instead, so that its mean can be set against the default's. With
``--ensemble`` it also prints the rule calibrated on the salts' predictions averaged (geometric mean,
member by member): what averaging over the salts would give. docs/evaluation/tried.md quotes these
figures.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast
from unittest.mock import patch

import numpy as np

from slurm_harp.core import features
from slurm_harp.core.request import Target
from slurm_harp.evaluation.split import Timeline
from slurm_harp.learning.strategy import Seen
from tests.bench.common import fitted_ours, shared_timeline, study_parser
from tests.bench.study_method import BUDGET, VARIANTS, Figures, figures_header, figures_line, scored

_SCALE = 1.0 / 2**32


@contextmanager
def salted_hashes(salt: int) -> Iterator[None]:
    """features' categorical hash with ``salt`` for the duration (0: the shipped one)."""
    plain = features._hash  # row() looks it up at call time

    def salted(value: str | None) -> float:
        return math.nan if value is None else zlib.crc32(f"{salt}:{value}".encode()) * _SCALE

    with patch.object(features, "_hash", salted if salt else plain):  # a study's hook into a helper
        yield


def _averaged(seen: list[Seen], names: list[str]) -> dict[str, np.ndarray]:
    """Each member's predictions, geometric mean over the salts (the same jobs, row for row)."""
    return {name: np.exp(np.mean([np.log(s.predictions[name]) for s in seen], axis=0)) for name in names}


def ensemble(timeline: Timeline, target: Target, salts: int) -> Figures:
    """The rule calibrated and scored on the salts' averaged predictions."""
    fits = []
    for salt in range(salts):
        with salted_hashes(salt):
            fits.append(fitted_ours(timeline, target, BUDGET))
    names = sorted(set.intersection(*(set(val.predictions) for _, val, _ in fits)))
    rungs = [rung for rung in fits[0][0] if rung[0] in names]
    val, test = fits[0][1], fits[0][2]
    val_preds = _averaged([f[1] for f in fits], names)
    test_preds = _averaged([f[2] for f in fits], names)
    return scored(rungs, val_preds, val.td, test_preds, test.td)


def spread(runs: list[Figures]) -> tuple[Figures, Figures]:
    """Column-wise minimum and maximum of ``runs``."""
    columns = list(zip(*runs, strict=True))
    return cast(Figures, tuple(map(min, columns))), cast(Figures, tuple(map(max, columns)))


def mean(runs: list[Figures]) -> Figures:
    """Column-wise mean of ``runs``."""
    return cast(Figures, tuple(float(np.mean(column)) for column in zip(*runs, strict=True)))


def main() -> None:
    parser = study_parser(__doc__ or "", "KTH,SDSC,CTC,LANL")
    parser.add_argument("--salts", type=int, default=5, help="salts 0 .. N-1 (default: %(default)s)")
    parser.add_argument("--variant", default="default", choices=list(VARIANTS), help="study_method's variant")
    parser.add_argument("--ensemble", action="store_true", help="also the salts' predictions averaged")
    args = parser.parse_args()
    target = Target(args.target)
    for trace in args.traces.split(","):
        path, timeline = shared_timeline(trace)
        print(figures_header(path, target))
        runs = []
        for salt in range(args.salts):
            with salted_hashes(salt):
                runs.append(VARIANTS[args.variant](timeline, target))
            print(figures_line(f"salt {salt}", runs[-1]), flush=True)
        low, high = spread(runs)
        print(figures_line("lowest", low))
        print(figures_line("highest", high))
        print(figures_line("mean", mean(runs)), flush=True)
        if args.ensemble:
            print(figures_line(f"mean of {args.salts}", ensemble(timeline, target, args.salts)), flush=True)


if __name__ == "__main__":
    main()
