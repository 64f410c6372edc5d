"""One target, end to end in memory: fit the family on the training rows, choose a model and
calibrate the safety rule on the validation rows. Shared by `harp train` (learning.trainer) and
`harp evaluate` (evaluation.ours), so both serve exactly the same method.

The rule's rungs: every quantile model of the ladder at ``ladder_margins``, the model the
selection policy chose at ``point_margins`` (HARP's adjustment factor, as rungs the rule may
pick per job rather than one factor for all), and a few causal history statistics (the recent
runs of the same user and job name: a consistent user is a confident prediction) at
``history_margins`` (off by default). The selection policy ranks fitted models only.

Once the rule is calibrated, the published models are brought up to date (``refreshed``, Refit):
by default fitted again on every job, or continued on the jobs that ended since their fit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np

from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import Calibration, ladder_limits
from slurm_harp.learning.calibration import CalibrationConfig, calibrate, losing, too_few
from slurm_harp.learning.family import SKLEARN, FamilyConfig, fit_family, fit_sklearn, update_family
from slurm_harp.learning.member import HISTORY, Member, history_members
from slurm_harp.learning.selection import SelectionPolicy, Table, score_table, select
from slurm_harp.learning.targets import TargetData

log = logging.getLogger(__name__)


class Refit(StrEnum):
    """What is served once the rule is calibrated on models fitted before the validation window.

    Served as they are (OFF), those models are one window older on the next jobs than they were
    on the jobs the rule was calibrated on, and test kill rates drifted past the budget. FULL (the
    default) fits them again on every job, for about a third of the training time. UPDATE
    continues each with a few trees fitted on the jobs since (family.update_family): the served
    model is the calibrated one plus a correction for the newest jobs, a little cheaper than FULL
    and no better overall. The figures: experiments/tried.md#the-record."""

    FULL = "full"
    UPDATE = "update"
    OFF = "off"


@dataclass(frozen=True)
class MethodConfig:
    family: FamilyConfig = field(default_factory=FamilyConfig)
    selection: SelectionPolicy = field(default_factory=SelectionPolicy)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    ladder_margins: tuple[float, ...] = (1.0,)
    point_margins: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0)
    # Off by default: with one validation-wide risk per rung, history rungs cut less waste on
    # most shared traces (experiments/tried.md#the-record).
    history_margins: tuple[float, ...] = ()


# History features read as predictions (model space = the feature's log1p scale).
HISTORY_RUNGS: dict[Target, tuple[str, ...]] = {
    Target.TIME: ("h30d_name_log_max_s", "h30d_user_log_max_s"),
    Target.MEMORY: ("h30d_name_log_max_mem_mb",),
    Target.CPUS: ("h30d_name_log_last_cpus", "h30d_user_log_last_cpus"),
}


@dataclass(frozen=True)
class Fitted:
    target: Target
    members: dict[str, Member]
    chosen: str
    table: Table  # validation metrics per member
    calibration: Calibration
    figures: dict[str, float]  # validation figures of the calibrated rule
    predictions: dict[str, np.ndarray]  # every member's validation predictions, in the target's unit
    seconds: dict[str, float]

    @property
    def published(self) -> list[str]:
        """The models the daemon needs, in family order: every quantile model (the policy may
        serve any), the chosen model and whatever the calibrated rule reads."""
        wanted = {*self.calibration.models, self.chosen}
        return [name for name, m in self.members.items() if name in wanted or m.kind == "quantile"]


def predict_units(
    members: Mapping[str, Member], names: Iterable[str], x: np.ndarray, td: TargetData
) -> dict[str, np.ndarray]:
    """Each named member's predictions in the target's unit. No rows give empty predictions:
    LightGBM's sklearn models refuse to predict on zero rows."""
    if x.shape[0] == 0:
        return {name: np.empty(0, dtype=np.float64) for name in names}
    return {name: td.from_model(members[name].predict(x)) for name in names}


def refit_published(
    fitted: Fitted, x: np.ndarray, td: TargetData, rows: np.ndarray, config: MethodConfig
) -> Fitted:
    """``fitted`` with the models it publishes (the rule's, the chosen one, the quantile ladder)
    fitted again on ``rows`` that have an observed value; the choice and the rule stay. History
    members are not fitted: they stay as they are."""
    rows = rows[td.labelled()[rows]]
    part = td.take(rows)
    wanted = set(fitted.published)
    family = replace(config.family, compare=tuple(k for k in config.family.compare if k in wanted))
    again = fit_family(x[rows], part.to_model(part.value), part.censored, part.cost, family)
    return replace(fitted, members=fitted.members | {m.name: m for m in again if m.name in wanted})


def refreshed(
    fitted: Fitted,
    refit: Refit,
    x: np.ndarray,
    td: TargetData,
    rows: np.ndarray,
    fitted_rows: np.ndarray,
    config: MethodConfig,
) -> Fitted:
    """What is served on the jobs after ``rows`` (every row known by then) under ``refit``;
    ``fitted_rows``: the rows ``fitted`` was trained on. UPDATE continues the boosted models the
    rule publishes on the labelled rows they had not seen (family.update_family); a published
    sklearn model, which cannot be continued, is fitted again on every labelled row. The choice
    and the rule stay in every mode."""
    if refit is Refit.FULL:
        return refit_published(fitted, x, td, rows, config)
    if refit is Refit.OFF:
        return fitted
    family = config.family
    every = rows[td.labelled()[rows]]
    new = np.setdiff1d(every, fitted_rows)  # sorted: dataset rows are in submit order
    part, known = td.take(new), td.take(every)
    published = [fitted.members[name] for name in fitted.published]
    again = update_family(published, x[new], part.to_model(part.value), part.censored, part.cost, family)
    y = known.to_model(known.value)
    again += [fit_sklearn(m.kind, x[every], y, family) for m in published if m.kind in SKLEARN]
    return replace(fitted, members=fitted.members | {m.name: m for m in again})


def rung_candidates(kinds: Mapping[str, str], chosen: str, config: MethodConfig) -> list[tuple[str, float]]:
    """``kinds``: each member's kind by name, in family order."""
    rungs = [(name, m) for name, kind in kinds.items() if kind == "quantile" for m in config.ladder_margins]
    rungs += [(chosen, m) for m in config.point_margins if (chosen, m) not in rungs]
    rungs += [(name, m) for name, kind in kinds.items() if kind == HISTORY for m in config.history_margins]
    return rungs


@dataclass(frozen=True)
class Choice:
    chosen: str
    table: Table
    calibration: Calibration
    figures: dict[str, float]


def choose_and_calibrate(
    kinds: Mapping[str, str], predictions: Mapping[str, np.ndarray], val: TargetData, config: MethodConfig
) -> Choice:
    """Choose a model and calibrate the rule on the rows ``val`` (``predictions``: every member's
    for those rows, in the target's unit; ``kinds``: each member's kind by name)."""
    models = {name: p for name, p in predictions.items() if kinds[name] != HISTORY}
    table = score_table(models, val.value, val.requested, val.censored, val.waste_weight)
    chosen = select(table, config.selection)
    rungs = rung_candidates(kinds, chosen, config)
    calibration, figures = calibrate(predictions, val, rungs, config.calibration)
    return Choice(chosen, table, calibration, figures)


def limits_calibrated_on(
    kinds: Mapping[str, str],
    predictions: Mapping[str, np.ndarray],
    val: TargetData,
    config: MethodConfig,
    rows: np.ndarray,
) -> np.ndarray:
    """The limits (NaN = keeps the request) on every row of ``val`` of the rule chosen and
    calibrated as training does, but on ``rows`` of it only: promotion judges them on the others,
    out of sample."""
    part = {name: p[rows] for name, p in predictions.items()}
    rule = choose_and_calibrate(kinds, part, val.take(rows), config).calibration
    return ladder_limits(predictions, val.requested, val.weight, rule, val.group)


def fit_and_calibrate(
    x: np.ndarray, td: TargetData, train: np.ndarray, validation: np.ndarray, config: MethodConfig
) -> Fitted:
    """``train`` / ``validation``: row indices into ``x`` and ``td``. Training uses the train rows
    with an observed value; the choice and the calibration see the validation rows only."""
    seconds: dict[str, float] = {}
    started = time.monotonic()
    rows = train[td.labelled()[train]]
    if rows.size == 0:
        raise ValueError(f"no training job has an observed {td.target.value}")
    tr = td.take(rows)
    if rows.size > config.family.ladder_max_rows:  # a large site: say what the cap leaves out
        log.info(
            "%s: the quantile ladder learns from %d of %d training jobs, spread over the window "
            "(ladder_rows)",
            td.target.value,
            config.family.ladder_max_rows,
            rows.size,
        )
    fitted = fit_family(x[rows], tr.to_model(tr.value), tr.censored, tr.cost, config.family)
    if config.history_margins:
        fitted += history_members(HISTORY_RUNGS[td.target], FEATURE_NAMES)
    members = {m.name: m for m in fitted}
    seconds["fit"] = time.monotonic() - started
    started = time.monotonic()
    val = td.take(validation)
    predictions = predict_units(members, members, x[validation], td)
    choice = choose_and_calibrate({name: m.kind for name, m in members.items()}, predictions, val, config)
    chosen, calibration, figures = choice.chosen, choice.calibration, choice.figures
    seconds["calibrate"] = time.monotonic() - started
    split = calibration.by != "none"
    log.info(
        "%s: chose %s; rule cuts %.1f %% of validation waste at %.2f %% newly killed (%d rungs%s)",
        td.target.value,
        chosen,
        figures["waste_cut_pct"],
        figures["newly_killed_pct"],
        len(calibration.rungs),
        f"; risks of their own for {len(calibration.group_risks)} partitions" if split else "",
    )
    if (few := too_few(figures)) is not None:
        log.warning("%s: %s", td.target.value, few)
    if (loss := losing(figures)) is not None:
        log.warning("%s: %s", td.target.value, loss)
    return Fitted(td.target, members, chosen, choice.table, calibration, figures, predictions, seconds)
