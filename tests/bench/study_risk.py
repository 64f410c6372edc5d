"""Study: a per-job kill risk in the safety rule, against the shipped one risk per rung.

    .venv/bin/python -m tests.bench.study_risk [--traces KTH,SDSC] [--target time]

`harp evaluate`'s protocol (60 / 20 / 20 chronological split, 1 % budget held in each of the four
parts of the validation window); ours is fitted once per trace (HarpStrategy, refit included),
then the rule is calibrated on validation with each way of pricing a rung's risk and scored on
the test window:
- per rung: the shipped rule (one validated kill rate per rung); it must match `harp evaluate`;
- Mondrian: each rung's validated kill rate per bin of the limit's fraction of the request
  (5 bins), of the job's quantile spread (log q0.99 - log q0.50, 4 bins), of its size (the
  rule's weight, 4 bins), of fraction x spread (5 x 3), per partition (the issue's optional
  per-partition calibration, Mondrian style), per user (those with at least 100 validation jobs;
  the others share one bin), and per user x fraction;
- out of fold ("oof"): a validation job's risks measured on the other three quarters of the
  window, so that the penalty is not chosen on risks that saw the job's own outcome;
- shrunk ("a50", "a200"): a cell's risk (k + a p) / (n + a), p its fraction bin's, so that a cell
  of few jobs stays near its parent's risk;
- classifier: a learned per-job risk (see learned_risk);
- risk^g: the shipped risks raised to a power g (POWERS) before the penalty prices them: g < 1
  prices the riskier rungs relatively less, g > 1 relatively more;
- oracle: per job the lowest-waste rung that does not kill: an upper bound for these rungs.
Prints waste cut % / newly killed % on validation and test. docs/evaluation/tried.md quotes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import lightgbm as lgb
import numpy as np

from slurm_harp.accounting.record import JobRecord
from slurm_harp.core.request import Target
from slurm_harp.learning import calibration as cal
from slurm_harp.learning.calibration import CalibrationConfig
from slurm_harp.learning.strategy import Seen
from tests.bench.common import fitted_ours, per_trace, shared_timeline

RULE = CalibrationConfig()  # the shipped calibration: 1 % budget in each of 4 parts, 161 penalties
BUDGET, FLOOR = RULE.kill_budget, RULE.floor
FRACTION_EDGES = np.array([0.1, 0.25, 0.5, 0.75, 1.0 - 1e-9])
POWERS = (0.5, 0.75, 1.5, 2.0)
USER_JOBS = 100  # a user with fewer validation jobs shares one bin with the others


class Window:
    """One window's usable jobs under every rung: limits, kills, waste (calibration's terms)."""

    def __init__(self, seen: Seen, jobs: list[JobRecord], rungs: list[tuple[str, float]]) -> None:
        td = seen.td
        use = cal._usable(td)
        self.td = td.take(np.flatnonzero(use))
        self.x = seen.x[use]
        self.partitions = [jobs[i].request.partition or "" for i in seen.index[use]]
        self.users = [jobs[i].request.user_name or "" for i in seen.index[use]]
        self.preds = {name: p[use] for name, p in seen.predictions.items()}
        self.limits = cal.rung_limits(self.preds, rungs, self.td.requested, FLOOR)
        self.scored = cal._score(self.preds, self.td, rungs, FLOOR)

    def cells(self, score: np.ndarray | None, edges: np.ndarray | None, fraction: bool) -> np.ndarray:
        """(n, R) cell of each job under each rung."""
        n, r = self.limits.shape
        cell = np.zeros((n, r), dtype=np.int64)
        if fraction:
            cell = np.digitize(self.limits / self.td.requested[:, None], FRACTION_EDGES)
        if score is not None and edges is not None:
            cell = cell * (len(edges) + 1) + np.digitize(score, edges)[:, None]
        return cell


Score = Callable[[Window], np.ndarray]


def risk_table(
    window: Window,
    cell: np.ndarray,
    cells: int,
    rows: np.ndarray | None = None,
    shrink: tuple[float, int] = (0, 1),
) -> np.ndarray:
    """(R, cells): (k + 1) / (n + 1) per rung and cell on ``window``'s ``rows`` (all: calibration's
    estimate). ``shrink`` = (alpha, divisor): (k + alpha p) / (n + alpha) instead, p the parent
    cell's (cell // divisor) estimate, so a cell of few jobs keeps near its parent's risk."""
    killed = window.scored.killed
    k, n = np.zeros((killed.shape[1], cells)), np.zeros((killed.shape[1], cells))
    for r in range(killed.shape[1]):
        has = np.isfinite(window.limits[:, r]) & (True if rows is None else rows)
        k[r] = np.bincount(cell[has, r], weights=killed[has, r].astype(float), minlength=cells)
        n[r] = np.bincount(cell[has, r], minlength=cells)
    alpha, divisor = shrink
    if alpha == 0:
        return (k + 1.0) / (n + 1.0)
    parent = np.arange(cells) // divisor
    pk = np.stack([np.bincount(parent, weights=row_k) for row_k in k])
    pn = np.stack([np.bincount(parent, weights=row_n) for row_n in n])
    out: np.ndarray = (k + alpha * ((pk + 1.0) / (pn + 1.0))[:, parent]) / (n + alpha)
    return out


def cell_risks(
    val: Window, cells_v: np.ndarray, cells_t: np.ndarray, cells: int, folds: int, shrink: tuple[float, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Each (job, rung)'s risk from its cell, on validation and test. With ``folds`` > 1 a
    validation job's comes from the other folds (out of fold: the penalty is then chosen on risks
    that did not see the job's own outcome); the test window's from all of validation."""
    columns = np.arange(cells_v.shape[1])[None, :]
    table = risk_table(val, cells_v, cells, shrink=shrink)
    risk_t = table[columns, cells_t]
    if folds <= 1:
        return table[columns, cells_v], risk_t
    risk_v = np.zeros(cells_v.shape)
    for fold in np.array_split(np.arange(len(val.td)), folds):
        others = np.ones(len(val.td), dtype=bool)
        others[fold] = False
        risk_v[fold] = risk_table(val, cells_v, cells, others, shrink)[columns, cells_v[fold]]
    return risk_v, risk_t


def calibrated(val: Window, test: Window, risk_val: np.ndarray, risk_test: np.ndarray) -> list[float]:
    """[validation cut, kill %, test cut, kill %] with the penalty chosen as calibrate() does."""
    parts = np.array_split(np.arange(len(val.td)), RULE.chunks)
    scored = replace(val.scored, risk=risk_val)
    found = cal._search(scored, parts, BUDGET, cal.penalty_grid(val.td, RULE.grid))
    if found is None:
        return [0.0, 0.0, 0.0, 0.0]
    cut, penalty, kill, _ = found
    scored = replace(test.scored, risk=risk_test)
    killed, after = cal._effect(scored, cal._choose(scored, penalty))
    test_cut = cal._cut(float(scored.base_waste.sum()), after)
    return [cut, kill, test_cut, 100.0 * float(killed.mean())]


def pairs(window: Window, rungs: list[tuple[str, float]]) -> np.ndarray:
    """(n x R, features + 3): each job's features beside one rung's level, margin and log limit
    fraction of the request."""
    n, r = window.limits.shape
    level = np.array([float(name[1:]) if name.startswith("q") else 0.0 for name, _ in rungs])
    margin = np.array([m for _, m in rungs])
    fraction = np.log(np.maximum(window.limits, FLOOR) / window.td.requested[:, None])
    extra = np.stack([np.tile(level, n), np.tile(margin, n), fraction.reshape(-1)], axis=1)
    out: np.ndarray = np.concatenate([np.repeat(window.x, r, axis=0), extra], axis=1).astype(np.float32)
    return out


def learned_risk(val: Window, test: Window, rungs: list[tuple[str, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Risk per (job, rung) from a LightGBM classifier of "newly killed" over the job's features and
    the rung, on the pairs where the rung lowers the request: out of fold on validation (5
    consecutive folds), fitted on all of validation for the test window."""
    params = {"objective": "binary", "num_leaves": 15, "learning_rate": 0.05, "min_data_in_leaf": 50}
    params |= {"num_threads": 2, "seed": 0, "deterministic": True, "verbose": -1}
    n, r = val.limits.shape
    x, y = pairs(val, rungs), val.scored.killed.reshape(-1).astype(np.float64)
    lowers = (val.limits < val.td.requested[:, None]).reshape(-1)
    risk_val = np.zeros(n * r)
    for fold in np.array_split(np.arange(n), 5):
        inside = np.zeros(n, dtype=bool)
        inside[fold] = True
        fit = np.repeat(~inside, r) & lowers
        model = lgb.train(params, lgb.Dataset(x[fit], y[fit]), num_boost_round=200)
        held = np.repeat(inside, r)
        risk_val[held] = model.predict(x[held])
    model = lgb.train(params, lgb.Dataset(x[lowers], y[lowers]), num_boost_round=200)
    lowers_test = test.limits < test.td.requested[:, None]
    predicted = np.asarray(model.predict(pairs(test, rungs)), dtype=np.float64)
    risk_test = np.where(lowers_test, predicted.reshape(lowers_test.shape), 0.0)
    return np.where(lowers, risk_val, 0.0).reshape(n, r), risk_test


def codes(values: list[str], names: list[str]) -> np.ndarray:
    """Each value's rank among ``names``, -1 for any other."""
    rank = {name: float(i) for i, name in enumerate(names)}
    return np.array([rank.get(v, -1.0) for v in values])


def oracle(window: Window) -> float:
    sc = window.scored
    best = np.minimum(np.where(sc.killed, np.inf, sc.waste).min(axis=1), sc.base_waste)
    return cal._cut(float(sc.base_waste.sum()), float(best.sum()))


def spread(window: Window) -> np.ndarray:
    top = max(n for n in window.preds if n.startswith("q"))
    out: np.ndarray = np.log1p(window.preds[top]) - np.log1p(window.preds["q0.50"])
    return out


def size(window: Window) -> np.ndarray:
    out: np.ndarray = np.log(np.maximum(window.td.weight, 1e-9))
    return out


def study(trace: str, target: Target) -> None:
    path, timeline = shared_timeline(trace)
    rungs, seen_val, seen_test = fitted_ours(timeline, target, BUDGET)
    val, test = Window(seen_val, timeline.jobs, rungs), Window(seen_test, timeline.jobs, rungs)
    # Partitions seen on validation get a bin each (by their rank), any other shares one; users
    # likewise, those with at least USER_JOBS validation jobs.
    names = sorted(set(val.partitions))
    heavy = sorted(u for u, c in Counter(val.users).items() if c >= USER_JOBS)

    def partition(window: Window) -> np.ndarray:
        return codes(window.partitions, names)

    def user(window: Window) -> np.ndarray:
        return codes(window.users, heavy)

    print(f"{path.name}, {target.value}: {len(val.td)} validation and {len(test.td)} test jobs")
    # (label, score, bins, split by fraction too, folds, shrinkage alpha)
    variants: list[tuple[str, Score | None, int, bool, int, float]] = [
        ("per rung (shipped)", None, 0, False, 1, 0),
        ("per rung, out of fold", None, 0, False, 4, 0),
        ("fraction of request", None, 0, True, 1, 0),
        ("fraction, out of fold", None, 0, True, 4, 0),
        ("quantile spread", spread, 4, False, 1, 0),
        ("size", size, 4, False, 1, 0),
        ("fraction x spread", spread, 3, True, 1, 0),
        ("partition", partition, len(names), False, 1, 0),
        ("user", user, len(heavy), False, 1, 0),
        ("user, out of fold", user, len(heavy), False, 4, 0),
        ("user x fraction", user, len(heavy), True, 1, 0),
        ("user x fraction, oof", user, len(heavy), True, 4, 0),
        ("user x fraction, a50", user, len(heavy), True, 1, 50),
        ("... a50, out of fold", user, len(heavy), True, 4, 50),
        ("... a200, out of fold", user, len(heavy), True, 4, 200),
    ]
    for label, score_of, bins, fraction, folds, alpha in variants:
        score_v = None if score_of is None else score_of(val)
        score_t = None if score_of is None else score_of(test)
        edges = None
        if score_of is partition or score_of is user:
            edges = np.arange(bins) - 0.5  # one bin per name, the others below
        elif score_v is not None:
            edges = np.quantile(score_v[np.isfinite(score_v)], np.linspace(0, 1, bins + 1)[1:-1])
        cell_v, cell_t = val.cells(score_v, edges, fraction), test.cells(score_t, edges, fraction)
        cells = int(max(cell_v.max(), cell_t.max())) + 1
        # Shrunk towards the cell's fraction bin (the score's bins sit inside it).
        divisor = 1 if edges is None else len(edges) + 1
        risk_v, risk_t = cell_risks(val, cell_v, cell_t, cells, folds, (alpha, divisor))
        print(f"  {label:22} {row(*calibrated(val, test, risk_v, risk_t))}")
    risk_val, risk_test = learned_risk(val, test, rungs)
    print(f"  {'classifier':22} {row(*calibrated(val, test, risk_val, risk_test))}")
    for power in POWERS:
        priced = val.scored.risk**power  # the rule's risks are validation's on both windows
        print(f"  {f'risk^{power}':22} {row(*calibrated(val, test, priced, priced))}")
    print(f"  {'oracle over the rungs':22} {row(oracle(val), 0.0, oracle(test), 0.0)}")


def row(val_cut: float, val_kill: float, test_cut: float, test_kill: float) -> str:
    return f"validation {val_cut:5.1f} % / {val_kill:.2f} %   test {test_cut:5.1f} % / {test_kill:.2f} %"


def main() -> None:
    per_trace(__doc__ or "", study, "KTH,SDSC")


if __name__ == "__main__":
    main()
