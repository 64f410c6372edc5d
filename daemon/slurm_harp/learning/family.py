"""The model family: asymmetric-loss boosted trees, and HARP's own regressors for comparison.

Every model learns the target in model space (log1p, see learning.targets) and exports to ONNX
with a native-vs-ONNX parity check (learning.member). Members, by name:
- "q0.90" ...: LightGBM quantile at that level; when the training rows include censored jobs,
  ``censored_rounds`` more trees follow on the one-sided (censored) pinball loss.
- "huber": HARP's asymmetric Huber (0.9 under / 0.1 over), a quantile-0.9 start then custom trees.
- "eloss": E-Loss style pinball whose under-prediction side weighs the job's cost (cores x time).
- "hist_<feature>": not a fitted model but one causal history feature read as a prediction
  (e.g. the user+name's longest recent run): a rung for the safety rule, which learns on
  validation how far it can be trusted. Its ONNX graph just picks the column.
- "linear", "tree", "mlp": HARP's family (sklearn: linear regression, a decision tree, a small
  MLP) on the same features, median-imputed; they read censored labels as observed, as HARP did.
  Fitted on at most ``sklearn_max_rows`` training rows (the MLP is slow on more).
The comparison models (all but the quantile ladder) see at most ``compare_max_rows`` training
rows: on a million jobs they would otherwise double the training time. The ladder sees at most
``ladder_max_rows``. A capped fit takes rows spread evenly over the training window (``spread``),
not the newest: the newest rows alone went over the kill budget on most shared traces, while rows
spread over the window killed about as often as the whole window did (experiments/tried.md#the-record).
Every job still feeds the history features of the rows that are fitted.
``update_family`` brings fitted boosters up to date with jobs that ended since: a few more trees
of each one's loss on those jobs only (learning.fitting, Refit.UPDATE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from slurm_harp.learning import booster, sklearn_models
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.member import BOOSTED, Member
from slurm_harp.learning.objectives import AsymmetricHuber, CostWeightedPinball, Pinball
from slurm_harp.model.card import quantile_key

SKLEARN = sklearn_models.KINDS
COMPARISON: tuple[str, ...] = ("huber", "eloss", *SKLEARN)


@dataclass(frozen=True)
class FamilyConfig:
    quantiles: tuple[float, ...] = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)
    compare: tuple[str, ...] = COMPARISON
    eloss_tau: float = 0.9
    # A quarter of the main fit's trees each (side_rounds); boosted() keeps that share when a site
    # sets its own number of trees.
    censored_rounds: int = 50
    start_rounds: int = 50  # quantile trees under a custom-loss model
    update_rounds: int = 50  # trees each boosted model adds in update_family (and as many censored)
    sklearn_max_rows: int = 100_000
    compare_max_rows: int = 100_000
    # 100 k: every target retrains on 1 M jobs within 5 minutes on 2 cores (benchmarks/bench_train.py);
    # no shared trace's training window reaches it.
    ladder_max_rows: int = 100_000
    params: BoosterParams = field(default_factory=BoosterParams)

    def __post_init__(self) -> None:
        if not self.quantiles or not all(0.0 < q < 1.0 for q in self.quantiles):
            raise ValueError(f"quantiles must lie in (0, 1): {self.quantiles}")
        unknown = set(self.compare) - set(COMPARISON)
        if unknown:
            raise ValueError(f"unknown comparison models {sorted(unknown)}; known: {COMPARISON}")

    def boosted(self, trees: int, learning_rate: float) -> FamilyConfig:
        """This family with ``trees`` boosting rounds at ``learning_rate``; the censored
        refinement and the custom-loss start keep their share (side_rounds)."""
        rounds = side_rounds(trees)
        params = replace(self.params, n_estimators=trees, learning_rate=learning_rate)
        return replace(self, params=params, censored_rounds=rounds, start_rounds=rounds, update_rounds=rounds)


def side_rounds(trees: int) -> int:
    """Trees of the censored refinement, of the quantile start under a custom loss and of an
    update, for a main fit of ``trees``: a quarter, as in FamilyConfig's defaults."""
    return max(1, trees // 4)


Rows = slice | np.ndarray  # a selection of training rows: every row, or some of them by index


def spread(n: int, cap: int) -> Rows:
    """Which of ``n`` rows in submit order a fit capped at ``cap`` rows learns from: all of them
    when they fit, else ``cap`` rows evenly spaced over the window, the newest one included (it
    anchors the spacing), in submit order."""
    if n <= cap:
        return slice(None)
    # Spacing (n - 1) / (cap - 1) > 1, so rounding keeps the indices distinct.
    picked: np.ndarray = np.linspace(n - 1, 0, cap).round().astype(np.intp)[::-1]
    return picked


Sample = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # x, y, censored, cost of some rows


def size(n: int, cap: int) -> int:
    """How many rows ``spread(n, cap)`` selects."""
    return min(n, cap)


def quantile_name(q: float) -> str:
    return f"q{quantile_key(q)}"


def fit_family(
    x: np.ndarray, y: np.ndarray, censored: np.ndarray, cost: np.ndarray, config: FamilyConfig
) -> list[Member]:
    """Fit every member on training rows (x, model-space y, censored flags, E-Loss cost).

    With more than one thread (``params.n_jobs``), HARP's sklearn models fit on a thread of their
    own beside the boosters, which leave a core idle at times (the ladder's last fit, the custom
    losses' Python gradients): the same models (tested); every target on the 1 M-job bench set in
    230 s against 244 s."""
    recent = spread(len(y), config.compare_max_rows)
    # The comparison models' rows, copied once for every model that needs them (an index
    # selection copies: 22 MB on 1 M jobs).
    rows: Sample = (x[recent], y[recent], censored[recent], cost[recent])
    kinds = [kind for kind in config.compare if kind in SKLEARN]
    if config.params.n_jobs <= 1 or not kinds:
        return _fit_all(x, y, censored, rows, config, {})
    with ThreadPoolExecutor(1) as side:
        later = {kind: side.submit(fit_sklearn, kind, rows[0], rows[1], config) for kind in kinds}
        return _fit_all(x, y, censored, rows, config, later)


def _fit_all(
    x: np.ndarray,
    y: np.ndarray,
    censored: np.ndarray,
    compared: Sample,
    config: FamilyConfig,
    later: dict[str, Future[Member]],
) -> list[Member]:
    """Every member in family order; ``compared``: the comparison models' rows; ``later``: sklearn
    models already being fitted, by kind."""
    params = config.params
    n = len(y)
    ladder = spread(n, config.ladder_max_rows)
    x_recent, y_recent, censored_recent, cost_recent = compared
    same = size(n, config.ladder_max_rows) == size(n, config.compare_max_rows)  # the same rows
    compare_set = booster.TrainingSet(x_recent, y_recent, params)
    ladder_set = compare_set if same else booster.TrainingSet(x[ladder], y[ladder], params)
    # Every plain quantile fit before the continued ones: see booster.TrainingSet.
    quantiles = sorted(set(config.quantiles))
    bases = ladder_set.quantiles(quantiles, params.n_estimators)
    # Huber and E-Loss start from the same quantile model when their levels agree (the default).
    levels = {k: 0.9 if k == "huber" else config.eloss_tau for k in config.compare if k in ("huber", "eloss")}
    starts = {
        level: compare_set.quantile(level, config.start_rounds) for level in sorted(set(levels.values()))
    }
    flags = censored[ladder]
    rounds = config.censored_rounds if bool(np.any(flags)) else 0
    members = [
        Member(quantile_name(q), "quantile", q, ladder_set.continued(base, Pinball(q), flags, rounds))
        for q, base in zip(quantiles, bases, strict=True)
    ]
    for kind in config.compare:
        if kind == "huber":
            model = compare_set.continued(
                starts[levels[kind]], AsymmetricHuber(), censored_recent, params.n_estimators
            )
            members.append(Member("huber", "huber", None, model))
        elif kind == "eloss":
            loss = CostWeightedPinball(config.eloss_tau, np.asarray(cost_recent, dtype=np.float64))
            model = compare_set.continued(starts[levels[kind]], loss, censored_recent, params.n_estimators)
            members.append(Member("eloss", "eloss", config.eloss_tau, model))
        elif kind in later:
            members.append(later[kind].result())
        else:
            members.append(fit_sklearn(kind, x_recent, y_recent, config))
    return members


def update_family(
    members: Sequence[Member],
    x: np.ndarray,
    y: np.ndarray,
    censored: np.ndarray,
    cost: np.ndarray,
    config: FamilyConfig,
) -> list[Member]:
    """The boosted ``members`` continued on new training rows (the jobs that ended since they were
    fitted), ``config.update_rounds`` trees each, on the rows fit_family would give them: a
    quantile model takes LightGBM's quantile trees (leaves re-fit to the new jobs' quantiles, so
    a shift in the workload is followed), then as many censored trees when the rows hold censored
    jobs; Huber and E-Loss take trees of their own loss. Other members are returned unchanged.

    A quantile-q tree's leaves hold at least min_child_samples / (1 - q) of the new jobs, so that
    each leaf's quantile rests on min_child_samples jobs above it: re-fit on a window's few jobs,
    a 0.99 leaf of 20 would sit near the largest of them, too low for the jobs to come, and the
    update killed over the budget (experiments/tried.md#the-record)."""
    params, rounds = config.params, config.update_rounds
    boosted = [m for m in members if m.kind in BOOSTED]
    if not boosted or len(y) == 0 or rounds <= 0:
        return list(members)
    n = len(y)
    ladder, recent = spread(n, config.ladder_max_rows), spread(n, config.compare_max_rows)
    sets: dict[int, booster.TrainingSet] = {}  # by row count: the two selections may be the same

    def binned(cap: int) -> booster.TrainingSet:
        if size(n, cap) not in sets:  # once per selection, and only when a member needs it
            part = spread(n, cap)
            sets[size(n, cap)] = booster.TrainingSet(x[part], y[part], params, leaf_rows=True)
        return sets[size(n, cap)]

    flags = censored[ladder]
    refine = rounds if bool(np.any(flags)) else 0
    out: dict[str, Member] = {}
    for m in boosted:
        if m.kind == "quantile" and m.quantile is not None:
            on = binned(config.ladder_max_rows)
            leaf_rows = math.ceil(params.min_child_samples / (1.0 - m.quantile))
            followed = on.quantile(m.quantile, rounds, base=m.model, leaf_rows=leaf_rows)
            model = on.continued(followed, Pinball(m.quantile), flags, refine)
        else:
            on = binned(config.compare_max_rows)
            loss = (
                AsymmetricHuber()
                if m.kind == "huber"
                else CostWeightedPinball(config.eloss_tau, np.asarray(cost[recent], dtype=np.float64))
            )
            model = on.continued(m.model, loss, censored[recent], rounds)
        out[m.name] = replace(m, model=model)
    return [out.get(m.name, m) for m in members]


def fit_sklearn(kind: str, x: np.ndarray, y: np.ndarray, config: FamilyConfig) -> Member:
    """One of HARP's models ("linear", "tree", "mlp") on at most ``sklearn_max_rows`` rows (spread)."""
    keep = spread(len(y), config.sklearn_max_rows)
    return Member(kind, kind, None, sklearn_models.fit(kind, x[keep], y[keep], config.params.seed))
