"""Training every target asked under the model store's writer lock, and saying what was published.

Shared by `harp train` (commands.train) and `harp nightly` (commands.nightly, which holds the lock
over its harvest too).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_harp.accounting.fields import FUTURE_SLACK_S, time_problem
from slurm_harp.core.request import Target
from slurm_harp.model.store import ModelStore, StoreBusy

if TYPE_CHECKING:
    from slurm_harp.accounting import JobRecord
    from slurm_harp.learning.pipeline import Outcome, Plan

log = logging.getLogger(__name__)

# Another `harp train` or `harp nightly` holds the model store (sysexits' EX_TEMPFAIL: try later).
STORE_BUSY = 75


def train_targets(
    records: list[JobRecord], targets: list[Target], plan: Plan, every: bool, now: float | None = None
) -> int:
    """Train, publish and judge each target, holding the store's writer lock; another run holding
    it: logged, nothing done, exit STORE_BUSY. ``every``: a target without enough data is skipped
    with a warning (the exit code is 1 only when none was published). A store that cannot be
    written (disk full, permissions) fails that target, logged, and the run goes on with the next
    one; the exit code is then 1. So does any other error publishing a target (a stray directory in
    the store, a bug): logged naming it. The serving version stays (model.store publishes
    atomically). A standard output that cannot be written (full, closed) stops only the printing of
    what was published, logged; cli says so and exits 1."""
    with contextlib.ExitStack() as held:
        refused = hold_store(held, plan.store, "not training")
        if refused is not None:
            return refused
        return train_held(records, targets, plan, every=every, now=now)


def hold_store(held: contextlib.ExitStack, store: Path, skipped: str) -> int | None:
    """Take the model store's writer lock into ``held``: None when taken, else the exit code, logged
    (STORE_BUSY when another run holds it, saying ``skipped``)."""
    try:
        held.enter_context(ModelStore(store).writer())
    except StoreBusy as exc:
        log.error("%s: %s; the next run will (exit %d)", exc, skipped, STORE_BUSY)
        return STORE_BUSY
    except OSError as exc:
        log.error("cannot lock the model store %s: %s", store, exc)
        return 1
    return None


def train_held(
    records: list[JobRecord], targets: list[Target], plan: Plan, every: bool, now: float | None = None
) -> int:
    """train_targets for a caller that holds the store's writer lock already (hold_store). ``now``:
    the clock the job store was read by for training (JobStore.training_records), else this host's."""
    from slurm_harp.learning.dataset import build_dataset
    from slurm_harp.learning.pipeline import Unfinished, Unloadable, train_and_publish
    from slurm_harp.learning.trainer import NotEnoughData, TrainingError

    # One clock for the jobs read, those trained on and the champion judged against them.
    now = time.time() if now is None else now
    records = trainable(records, now)  # harp train --db reads the same store as nightly
    data = build_dataset(records, max_rows=plan.max_rows)  # the same features serve every target
    published = 0
    missed: dict[Target, str] = {}  # what happened to each target not published, said at the end
    for target in targets:
        try:
            outcome = train_and_publish(records, data, target, plan, now=now)
        except TrainingError as exc:
            if not every:
                log.error("training failed: %s", exc)
                return 1
            log.warning("%s: not trained: %s", target.value, exc)
            missed[target] = NO_DATA if isinstance(exc, NotEnoughData) else NOT_TRAINED
        except Unloadable as exc:
            log.error("%s: %s; never served, the serving version stays", target.value, exc)
            missed[target] = f"published {exc.version}, which does not load"
        except Unfinished as exc:
            log.error("%s: %s", target.value, exc)
            missed[target] = "published, not finished"
        except OSError as exc:
            log.error(
                "%s: trained but not published in %s: %s; the serving version stays",
                target.value,
                plan.store,
                exc,
            )
            missed[target] = "not published"
        except Exception as exc:  # no other target's fault; KeyboardInterrupt and SystemExit end the run
            name = type(exc).__name__
            log.exception(
                "%s: failed, not published (%s: %s); the serving version stays", target.value, name, exc
            )
            missed[target] = f"failed ({name})"
        else:
            published += 1
            try:
                _print(outcome, plan)
            except OSError as exc:  # stdout full or closed: the version is out, the next target waits
                log.warning(
                    "%s: version %s published; cannot say so on standard output: %s",
                    target.value,
                    outcome.version,
                    exc,
                )
    # A target the data could not train is skipped; one the store failed fails the run.
    faults = sum(why not in (NO_DATA, NOT_TRAINED) for why in missed.values())
    _log_missed(missed, published, faults)
    return 0 if published and not faults else 1


NO_DATA = "not enough data"
NOT_TRAINED = "not trained"


def _log_missed(missed: dict[Target, str], published: int, faults: int) -> None:
    """One line on the targets not published, or published but not finished, when it matters: no
    target was finished, or the store failed one; "no target had enough data" only when that is what
    happened to each. Not "no target was published" for a version published (then not loading, or
    not pruned), which sent the operator looking for a publish that had happened."""
    what = "; ".join(f"{target.value}: {why}" for target, why in missed.items())
    if not published and missed and set(missed.values()) == {NO_DATA}:
        log.error("training failed: no target had enough data")
    elif not published and missed:
        log.error("training failed for every target: %s", what)
    elif faults:
        log.error("training failed for some targets: %s", what)


def _print(outcome: Outcome, plan: Plan) -> None:
    from slurm_harp.core.accuracy import format_summary

    target, result = outcome.target, outcome.result
    where = ModelStore(plan.store).target_dir(target)
    print(f"published {target.value} model {outcome.version} in {where}")
    training = result.card["training"]
    print(f"trained on {training['rows_train']} jobs, validated on {training['rows_validation']}")
    for key, values in result.validation.items():
        label = "request" if key == "request" else f"q{key}"
        shown = {k: v for k, v in values.items() if v is not None}
        print(f"  {label:8} {format_summary(shown)}")
    selection = result.card["selection"]
    print(f"  chosen by {selection['policy']['name']} on validation: {selection['chosen']}")
    rule = result.card["calibration"]
    figures = rule["validation"]
    net = figures.get("net_cut_pct")
    print(
        f"  safety rule: {len(rule['rungs'])} rungs, cuts {figures['waste_cut_pct']:.1f} % of the "
        f"validation waste at {figures['newly_killed_pct']:.2f} % newly killed "
        f"(budget {100 * rule['kill_budget']:.2f} %)"
        + ("" if net is None else f"; {net:.1f} % net of the killed jobs' attempts and re-runs")
    )
    if "too_few_jobs" in rule:
        print(f"  {rule['too_few_jobs']}")
    if outcome.verdict is not None:
        print(f"  {outcome.verdict.summary}")
    elif outcome.promoted:
        print("  promoted (--promote always)")
    else:
        print("  not promoted (--promote never)")
    if outcome.pruned:
        print(f"  removed old versions: {', '.join(outcome.pruned)}")


def trainable(records: list[JobRecord], now: float, left_out_of: str = "training") -> list[JobRecord]:
    """``records`` but those with a time the readers refuse now (fields.time_problem: before
    1970, or more than a day after ``now``), logged in one warning naming the first and what they
    are ``left_out_of`` (`harp report` and `harp evaluate --db` leave them out alike). Such a job
    was stamped by a controller's clock that ran ahead (read with the same clock) or stored before
    the trace readers checked (an SWF UnixStartTime in milliseconds: year 27969); trained on, it
    would stay the newest submission and leave every later challenger no new job to be judged on.
    It stays in the store: once the clock has passed its times it is trained on. Mirrored in SQL
    by accounting.training_window, which must change with it."""
    latest = now + FUTURE_SLACK_S
    kept: list[JobRecord] = []
    left: list[str] = []
    for record in records:
        times = (
            ("submit time", record.request.submit_time),
            ("start time", record.start_time),
            ("end time", record.end_time),
        )
        problem = next(
            (f"{name} {t} {p}" for name, t in times if (p := time_problem(t, latest, earliest=0))), None
        )
        if problem is None:
            kept.append(record)
        else:
            left.append(f"job {record.job_id}: {problem}")
    if left:
        log.warning(
            "%d jobs of the job store left out of %s, a time before 1970 or more than a day "
            "after this host's clock (unix seconds; %s)",
            len(left),
            left_out_of,
            left[0],
        )
    return kept
