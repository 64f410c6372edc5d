"""Accuracy and usefulness of predictions (definitions in the project's learning notes).

All functions take 1-d arrays of one unit (e.g. minutes): ``predicted``, ``actual`` (the run),
``requested`` (the user's limit) and optional ``cores`` (weights; 1 each by default).
Under-predicted means predicted < actual; over-predicted is the rest (predicted >= actual),
so every job is in exactly one of the two sets. A percentage error (UP_MAPE, OV_MAPE) is taken
over the jobs with a positive actual value only: one that used nothing (TotalCPU or MaxRSS of 0,
a job that failed at once) has none, and would make the mean infinite for every model. A
statistic over an empty set is NaN.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

Array = npt.ArrayLike


def _arrays(*values: Array) -> list[np.ndarray]:
    arrays = [np.asarray(v, dtype=np.float64).ravel() for v in values]
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"shape mismatch: {[a.shape for a in arrays]}")
    return arrays


def _pct_error(predicted: np.ndarray, actual: np.ndarray) -> np.ndarray:
    error: np.ndarray = 100.0 * np.abs(predicted - actual) / actual
    return error


def upp(predicted: Array, actual: Array) -> float:
    """Under-prediction percentage: % of jobs whose prediction is below their actual value."""
    p, r = _arrays(predicted, actual)
    return float(100.0 * np.mean(p < r)) if p.size else float("nan")


def up_mape(predicted: Array, actual: Array) -> float:
    """Mean absolute percentage error over the under-predicted jobs with r > 0 only."""
    p, r = _arrays(predicted, actual)
    under = (p < r) & (r > 0)
    return float(np.mean(_pct_error(p[under], r[under]))) if under.any() else float("nan")


def ov_mape(predicted: Array, actual: Array) -> float:
    """Mean absolute percentage error over the over-predicted (p >= r) jobs with r > 0 only."""
    p, r = _arrays(predicted, actual)
    over = (p >= r) & (r > 0)
    return float(np.mean(_pct_error(p[over], r[over]))) if over.any() else float("nan")


def aea(predicted: Array, actual: Array) -> float:
    """Average estimation accuracy (Tsafrir): mean of min(r, p) / max(r, p); 1 is perfect."""
    p, r = _arrays(predicted, actual)
    if not p.size:
        return float("nan")
    hi = np.maximum(p, r)
    ratio = np.divide(np.minimum(p, r), hi, out=np.ones_like(hi), where=hi > 0)
    return float(np.mean(ratio))


def newly_killed_pct(predicted: Array, actual: Array, requested: Array) -> float:
    """% of all jobs that a limit of min(prediction, request) would kill although their own
    request let them finish: prediction < run <= request."""
    p, r, q = _arrays(predicted, actual, requested)
    if not p.size:
        return float("nan")
    return float(100.0 * np.mean((p < r) & (r <= q)))


def waste_cut_pct(predicted: Array, actual: Array, requested: Array, cores: Array | None = None) -> float:
    """% of the reservation waste Σ cores·(limit - run) cut by using min(prediction, request) as
    the limit instead of the request, over jobs that finished under their request.

    Jobs the new limit would kill contribute no waste here: their cost is what
    ``newly_killed_pct`` reports, and the two are read together (waste cut at a kill budget).
    """
    p, r, q = _arrays(predicted, actual, requested)
    c = np.ones_like(r) if cores is None else _arrays(cores, r)[0]
    finished = r <= q
    before = float(np.sum(c[finished] * (q[finished] - r[finished])))
    limit = np.minimum(p, q)[finished]
    survives = limit >= r[finished]
    after = float(np.sum((c[finished] * (limit - r[finished]))[survives]))
    return cut_pct(before, after)


def finished_under_request(
    used: Array, requested: Array, censored: Array, stopped_by_harp: Array | None = None
) -> np.ndarray:
    """Jobs that finished under their own request: those whose waste a limit can cut and that a
    limit below their use newly kills. A censored job (stopped at a limit, its use a lower bound) is
    not, unless a limit harp brought below its request stopped it (``stopped_by_harp``,
    core.extension.stopped_at_harps_limit): it would have run on, at least to its use, under its own,
    and any limit below that kills it too. The one rule of `harp evaluate` (evaluation.costs),
    `harp report` and training (learning.limit_outcomes). Arrays broadcast, as numpy's do."""
    stopped = np.asarray(censored, dtype=bool)
    if stopped_by_harp is not None:
        stopped = stopped & ~np.asarray(stopped_by_harp, dtype=bool)
    with np.errstate(invalid="ignore"):
        mask: np.ndarray = ~stopped & (np.asarray(used) <= np.asarray(requested))
    return mask


def cut_pct(before: float, after: float) -> float:
    """How much lower ``after`` is than ``before``, in % of ``before``: the waste cut of every
    layer (training's calibration and promotion, `harp evaluate`, the advice replay). NaN when
    ``before`` is not positive: a window whose requests left no waste has nothing to cut, and
    0 % would read as limits that failed to cut it. Callers that write JSON turn it into null."""
    return 100.0 * (1.0 - after / before) if before > 0 else float("nan")


def kill_loss(limit: Array, actual: Array, requested: Array) -> np.ndarray:
    """Per job that a ``limit`` kills although its own ``requested`` let it finish after ``actual``:
    what the kill loses, in their unit (times cores: core-time). Its attempt, cut short at the limit,
    then its waste when it runs again under its request (one re-run, as `harp simulate` replays a
    killed job). waste_cut_pct counts a killed job's waste as gone; less these, the cut is net of the
    kills (training's net cut, `harp report`'s net saving). Arrays broadcast, as numpy's do."""
    out: np.ndarray = np.asarray(limit, dtype=np.float64) + np.asarray(requested, dtype=np.float64)
    return out - np.asarray(actual, dtype=np.float64)


def summary(
    predicted: Array, actual: Array, requested: Array | None = None, cores: Array | None = None
) -> dict[str, float]:
    """All of the above in one dict (waste and kills only when requests are known)."""
    out = {
        "n": float(np.asarray(actual).size),
        "upp": upp(predicted, actual),
        "up_mape": up_mape(predicted, actual),
        "ov_mape": ov_mape(predicted, actual),
        "aea": aea(predicted, actual),
    }
    if requested is not None:
        out["newly_killed_pct"] = newly_killed_pct(predicted, actual, requested)
        out["waste_cut_pct"] = waste_cut_pct(predicted, actual, requested, cores)
    return out


def format_summary(metrics: Mapping[str, float]) -> str:
    """A short one-line rendering for logs and the CLI."""
    names = ("upp", "ov_mape", "up_mape", "aea", "waste_cut_pct", "newly_killed_pct")
    return " ".join(f"{name}={metrics[name]:.3g}" for name in names if name in metrics)
