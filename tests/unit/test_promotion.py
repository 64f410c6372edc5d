"""Champion/challenger promotion: the rules, and `harp train --db` publishing through them."""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.accounting import JobRecord
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.commands import models as models_command
from slurm_harp.commands import train as train_command
from slurm_harp.core.policy import Policy
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.learning import pipeline
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.calibration import CalibrationConfig
from slurm_harp.learning.family import FamilyConfig
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.learning.limit_outcomes import assess
from slurm_harp.learning.promotion import Standing, challenge, judge
from slurm_harp.learning.targets import TargetData
from slurm_harp.learning.trainer import Window, train_target
from slurm_harp.model.retention import STALE_TEMP_S, sweep
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import LOCK_FILE, ModelStore, StoreBusy

BUDGET = 0.01


def test_no_champion_promotes() -> None:
    verdict = judge(Standing("new", 0.5, 20.0), None, BUDGET)
    assert verdict.promote and "no champion" in verdict.reason


@pytest.mark.parametrize(
    ("figures", "why"),
    [((50.0, 90.0), "newly kills 50.00 % > budget 1.00 %"), ((math.nan, 20.0), "not finite")],
)
def test_alone_a_challenger_must_be_finite_and_within_the_budget(
    figures: tuple[float, float], why: str
) -> None:
    """Judged with no champion, a challenger that kills half its window or has NaN figures was
    promoted: the checks came after the no-champion return."""
    verdict = judge(Standing("new", *figures), None, BUDGET)
    assert not verdict.promote and why in verdict.reason


def test_a_window_with_no_waste_to_cut_is_judged_on_its_kills_and_says_so() -> None:
    """Where the window's requests left no waste, promotion said both versions "cut 0.0 %" while
    `harp evaluate` showed no figure: the cut is NaN for both now (core.accuracy.cut_pct), the
    verdict says why no cut is compared, and promotion.json holds null (JSON has no NaN)."""
    verdict = judge(Standing("new", 0.5, math.nan), Standing("old", 0.2, math.nan), BUDGET, tolerance=0.5)
    assert verdict.promote
    assert verdict.reason == "no waste to cut on the window at 0.50 % newly killed (champion 0.20 %)"
    note = json.loads(json.dumps(verdict.to_dict(), allow_nan=False))
    assert note["challenger"]["waste_cut_pct"] is None and note["champion"]["waste_cut_pct"] is None
    alone = judge(Standing("new", 0.5, math.nan), None, BUDGET)
    assert alone.promote and json.loads(json.dumps(alone.to_dict(), allow_nan=False))["champion"] is None
    # Only one without a figure (not from challenge(), which grades both on the same jobs): refused,
    # where a comparison with NaN would have let it through.
    for new_cut, old_cut in ((math.nan, 25.0), (25.0, math.nan)):
        one = judge(Standing("new", 0.5, new_cut), Standing("old", 0.2, old_cut), BUDGET, tolerance=0.5)
        assert not one.promote and "cannot be compared" in one.reason


@pytest.mark.parametrize(
    ("challenger", "champion", "promote", "why"),
    [
        ((0.8, 30.0), (0.5, 25.0), True, "cuts 30.0 %"),  # more kills, but within the budget
        ((0.8, 24.6), (0.5, 25.0), True, "cuts 24.6 %"),  # within the tolerance
        ((0.8, 24.0), (0.5, 25.0), False, "tolerance"),  # cuts less
        ((1.5, 40.0), (0.5, 25.0), False, "> budget"),  # over the budget and the champion
        ((1.5, 10.0), (2.0, 25.0), True, "breaks the kill budget"),  # the champion is no longer safe
        ((0.5, 0.0), (2.0, 40.0), True, "breaks the kill budget"),  # ... and the challenger is
        ((2.5, 30.0), (2.0, 25.0), False, "> budget"),  # both unsafe, the challenger more so
        # Both unsafe, killing as many: the cut decides (a challenger cutting nothing was promoted).
        ((2.5, 0.0), (2.5, 30.0), False, "tolerance"),
        ((1.5, 2.0), (1.5, 40.0), False, "tolerance"),
        ((2.5, 29.6), (2.5, 30.0), True, "cuts 29.6 %"),
    ],
)
def test_rules(
    challenger: tuple[float, float], champion: tuple[float, float], promote: bool, why: str
) -> None:
    verdict = judge(Standing("new", *challenger), Standing("old", *champion), BUDGET, tolerance=0.5)
    assert verdict.promote is promote and why in verdict.reason
    assert verdict.to_dict()["verdict"].startswith("promoted" if promote else "kept the champion")


def _train(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    train_command.register(parser.add_subparsers())
    args = parser.parse_args(["train", *argv])
    code: int = args.func(args)
    return code


# A 4 % budget: the windows below, of 120-300 jobs, can show it met (calibration.jobs_needed: 75).
FAST = ("--quantiles", "0.5,0.9,0.99", "--compare", "none", "--kill-budget", "0.04")


def regular_users(n: int, seed: int = 3) -> list[JobRecord]:
    """Users who each run about a fifth of their limit, every time: much waste to cut safely."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        user = int(rng.integers(0, 6))
        limit = 60 * (user + 1)
        run = int(limit * 60 * 0.2 * rng.lognormal(0.0, 0.15))
        submit = 1_700_000_000 + 300 * i
        request = JobRequest(
            user_name=f"u{user}",
            job_name=f"job{user}",
            time_limit_minutes=limit,
            min_cpus=8,
            submit_time=submit,
        )
        out.append(
            JobRecord(str(i), request, "COMPLETED", elapsed_s=run, start_time=submit, end_time=submit + run)
        )
    return out


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.merge(regular_users(900), "sacct")
    return path


def test_train_from_the_job_store_judges_each_new_version(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    jobs = regular_users(1500)  # the db holds the first 900: each "night" below adds 300 more

    def night(*extra: str) -> str:
        assert _train("--db", str(db), "--store", str(store_dir), *FAST, *extra) == 0
        version = store.versions(Target.TIME)[-1]
        return version

    first = night()
    assert store.current_version(Target.TIME) == first
    assert "promoted: no champion" in capsys.readouterr().out
    note = store.verdict(Target.TIME, first) or {}
    assert note["promote"] and note["champion"] is None

    # Trained on the same jobs again: no job of the window is new to the serving version, so both
    # are judged as published on the whole window; not worse there, the new version is served.
    again = night()
    note = store.verdict(Target.TIME, again) or {}
    assert note["promote"] and "only 0 jobs of the window are new" in note["reason"]
    assert store.current_version(Target.TIME) == again

    # New jobs arrive. A challenger that may not go below 150 minutes cuts far less waste on them.
    with JobStore(db) as jobs_db:
        jobs_db.merge(jobs[900:1200], "sacct")
    second = night("--floor", "150")
    out = capsys.readouterr().out
    note = store.verdict(Target.TIME, second) or {}
    assert not note["promote"] and "kept the champion" in out, out
    assert note["challenger"]["waste_cut_pct"] < note["champion"]["waste_cut_pct"] - 0.5
    assert store.current_version(Target.TIME) == again

    # More new jobs, the default method: not worse than the serving version on them, promoted.
    with JobStore(db) as jobs_db:
        jobs_db.merge(jobs[1200:], "sacct")
    third = night()
    note = store.verdict(Target.TIME, third) or {}
    assert note["promote"] and note["champion"] is not None, note
    assert store.current_version(Target.TIME) == third

    # `harp models` shows each verdict.
    parser = argparse.ArgumentParser()
    models_command.register(parser.add_subparsers())
    args = parser.parse_args(["models", "--store", str(store_dir), "--target", "time"])
    assert args.func(args) == 0
    listing = capsys.readouterr().out
    assert f"* {third}" in listing and "kept the champion" in listing and "no champion" in listing


def test_promote_never_always_keep_and_a_broken_champion(db: Path, tmp_path: Path) -> None:
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--promote", "never", "--no-refit") == 0
    assert store.current_version(Target.TIME) is None and len(store.versions(Target.TIME)) == 1
    only = store.target_dir(Target.TIME) / store.versions(Target.TIME)[0]
    assert json.loads((only / "card.json").read_text())["training"]["refit"] == "off"
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--promote", "always") == 0
    champion = store.current_version(Target.TIME)
    assert champion == store.versions(Target.TIME)[-1]
    card = json.loads((store.target_dir(Target.TIME) / str(champion) / "card.json").read_text())
    assert card["training"]["refit"] == "full"  # the default
    # A champion whose files were damaged cannot be compared: the challenger replaces it.
    for f in (store.target_dir(Target.TIME) / str(champion)).glob("*.onnx"):
        f.write_bytes(b"damaged")
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--keep", "2") == 0
    newest = store.versions(Target.TIME)[-1]
    assert store.current_version(Target.TIME) == newest
    note = store.verdict(Target.TIME, newest) or {}
    assert "cannot be evaluated" in note["reason"]
    # --keep 2: the newest two, and the damaged champion's fallback that loads (the first version).
    assert store.versions(Target.TIME) == [only.name, champion, newest]


def test_without_new_jobs_a_worse_challenger_is_refused(db: Path, tmp_path: Path) -> None:
    """Trained on the same jobs, nothing in the challenger's window is new to the champion. It was
    promoted on its own kill budget alone, however little it cut; both are now judged as
    published on the whole window."""
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 0
    champion = store.current_version(Target.TIME)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--floor", "150", "--keep", "1") == 0
    worse = store.versions(Target.TIME)[-1]
    note = store.verdict(Target.TIME, worse) or {}
    assert not note["promote"], note
    assert "only 0 jobs of the window are new" in note["reason"] and "whole window" in note["reason"]
    assert note["challenger"]["waste_cut_pct"] < note["champion"]["waste_cut_pct"] - 0.5
    assert store.current_version(Target.TIME) == champion
    assert champion in store.versions(Target.TIME)  # --keep 1 keeps the serving version


def test_a_challenger_trained_on_older_jobs_is_refused(db: Path, tmp_path: Path) -> None:
    """A restored job store or an old trace: its window holds no job new to the champion, so it
    always won. Now refused, naming both dates, and the champion serves on."""
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    older = tmp_path / "older.sqlite"
    with JobStore(older) as jobs:
        jobs.merge(regular_users(700), "sacct")
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 0
    champion = store.current_version(Target.TIME)
    assert _train("--db", str(older), "--store", str(store_dir), *FAST) == 0
    stale = store.versions(Target.TIME)[-1]
    note = store.verdict(Target.TIME, stale) or {}
    assert not note["promote"] and "trained on older jobs than the champion" in note["reason"], note
    assert store.current_version(Target.TIME) == champion


def test_with_an_unreadable_current_a_challenger_over_the_budget_is_refused(tmp_path: Path) -> None:
    """A damaged CURRENT (garbage, a link) left the challenger to be promoted unchecked."""
    store = ModelStore(tmp_path / "models")
    result = train_target(regular_users(600), Target.TIME)
    version = store.publish(Target.TIME, result.files, result.card, make_current=False)
    (store.target_dir(Target.TIME) / "CURRENT").symlink_to("/etc/hostname")
    killing = replace(result.window, limits=np.ones_like(result.window.limits))  # one minute each
    verdict = challenge(store, Target.TIME, version, killing, BUDGET)
    assert not verdict.promote and "CURRENT unreadable" in verdict.reason and "> budget" in verdict.reason
    assert challenge(store, Target.TIME, version, result.window, BUDGET).promote


def served(limits: np.ndarray, td: TargetData) -> np.ndarray:
    """``limits`` of a rule as the daemon sets them under the default policy (its floor, min_gain)."""
    return Policy().new_values(td.target, limits, td.requested)


QUICK = MethodConfig(
    family=FamilyConfig(
        params=BoosterParams(n_estimators=40, num_leaves=15), quantiles=(0.5, 0.9), compare=()
    ),
    calibration=CalibrationConfig(kill_budget=0.04),  # as FAST: rules that rewrite on 100 jobs
)


@dataclass(frozen=True)
class Pair:
    """A store serving a champion, and a challenger published beside it."""

    store: ModelStore
    seen_until: float  # the champion's last submit time
    version: str  # the challenger's
    window: Window  # the challenger's, whose rule calibrated again records the rows it is asked for
    calibrate: Callable[[np.ndarray], np.ndarray]  # that rule calibrated again, as trained
    asked: list[np.ndarray]  # the rows promotion calibrated it again on, as it asks


def champion_and_challenger(tmp_path: Path, jobs: int) -> Pair:
    """A champion trained on 900 regular users' jobs, serving; a challenger trained on ``jobs``."""
    store = ModelStore(tmp_path / "models")
    champion = train_target(regular_users(900), Target.TIME, QUICK)
    store.publish(Target.TIME, champion.files, champion.card)
    result = train_target(regular_users(jobs), Target.TIME, QUICK)
    version = store.publish(Target.TIME, result.files, result.card, make_current=False)
    calibrate, asked = result.window.recalibrated, []
    assert calibrate is not None

    def spy(rows: np.ndarray) -> np.ndarray:
        asked.append(rows)
        return calibrate(rows)

    window = replace(result.window, recalibrated=spy)
    seen_until = champion.card["training"]["last_submit_epoch"]
    return Pair(store, seen_until, version, window, calibrate, asked)


@pytest.mark.parametrize(
    ("jobs", "judged", "which"),
    [
        (1000, 100, "submitted up to the champion's last job"),  # the window starts before the champion's end
        (1200, 120, "the first half of those after the champion's"),  # the champion is older than the window
    ],
)
def test_the_challengers_rule_is_judged_on_jobs_it_was_not_calibrated_on(
    tmp_path: Path, jobs: int, judged: int, which: str
) -> None:
    """The challenger's rule was calibrated on its whole validation window and judged on part of
    it: in sample, so within the budget by construction and biased to beat the champion, judged
    out of sample (audit: promo.py, CTC: 0.89 % newly killed as judged, 1.85 % calibrated apart).
    Now a rule chosen and calibrated on the window's earlier jobs is judged on the later ones."""
    pair = champion_and_challenger(tmp_path, jobs)
    store, seen_until, version, window = pair.store, pair.seen_until, pair.version, pair.window
    calibrate, asked = pair.calibrate, pair.asked
    budget = QUICK.calibration.kill_budget  # judged by the budget the rules were calibrated to
    verdict = challenge(store, Target.TIME, version, window, budget)
    (rows,) = asked
    later = np.setdiff1d(np.arange(len(window.td)), rows)
    assert later.size == judged and rows.max() < later.min()
    assert window.submit_time[later].min() > seen_until  # new to the champion too
    stand_in = calibrate(rows)[later]
    assert np.isfinite(stand_in).any()  # the rule calibrated apart rewrites, as the published one
    # Judged by what the daemon sets under the (default) policy: the rule's value through its floor
    # and min_gain.
    killed, cut = assess(served(stand_in, window.td.take(later)), window.td.take(later))
    assert (verdict.challenger.killed_pct, verdict.challenger.waste_cut_pct) == (killed, cut)
    assert f"judged on the {judged} latest jobs, the challenger's rule calibrated on the" in verdict.reason
    assert which in verdict.reason
    # Too few jobs to calibrate apart: the rule as published, and the verdict says so.
    verdict = challenge(store, Target.TIME, version, replace(window, recalibrated=None), budget)
    assert "the challenger's rule as published: calibrated on them too" in verdict.reason
    new = np.flatnonzero(window.submit_time > seen_until)
    assert f"the {new.size} jobs new to the champion" in verdict.reason
    killed, cut = assess(served(window.limits[new], window.td.take(new)), window.td.take(new))
    assert (verdict.challenger.killed_pct, verdict.challenger.waste_cut_pct) == (killed, cut)


def test_a_challenger_is_not_judged_by_a_rule_calibrated_on_too_few_jobs_to_rewrite(tmp_path: Path) -> None:
    """At the default 1 % budget a rule calibrated on fewer than 300 usable jobs never rewrites
    (calibration.jobs_needed). Promotion calibrated the challenger's again on the first 200 of
    its 400 new jobs: a stand-in that cut nothing, refused against a champion that cuts (audit:
    promo_refuse.py, KTH-SP2 from job 5000: 0.0 % against 13.5 %). Too few to calibrate apart,
    the rule is judged as published, and the verdict says why."""
    default = replace(QUICK, calibration=CalibrationConfig(kill_budget=BUDGET))
    store = ModelStore(tmp_path / "models")
    champion = train_target(regular_users(1600), Target.TIME, default)
    assert champion.card["calibration"]["rungs"]  # its 320 validation jobs show 1 % met
    store.publish(Target.TIME, champion.files, champion.card)
    result = train_target(regular_users(2000), Target.TIME, default)
    assert result.card["calibration"]["rungs"]
    version = store.publish(Target.TIME, result.files, result.card, make_current=False)
    window = result.window
    verdict = challenge(store, Target.TIME, version, window, BUDGET)
    new = np.flatnonzero(window.submit_time > champion.card["training"]["last_submit_epoch"])
    assert new.size == 400
    assert (verdict.challenger.killed_pct, verdict.challenger.waste_cut_pct) == assess(
        served(window.limits[new], window.td.take(new)), window.td.take(new)
    )
    assert verdict.promote and verdict.challenger.waste_cut_pct > 0, verdict.summary
    assert (
        "the 400 jobs new to the champion, the challenger's rule as published: calibrated on them too "
        "(too few jobs to calibrate it apart: 200 usable before those judged, 300 needed to show at "
        "most 1 % newly killed)"
    ) in verdict.reason


def test_train_refuses_two_sources_or_a_missing_db(tmp_path: Path, db: Path) -> None:
    store = str(tmp_path / "models")
    assert _train("--db", str(db), "--source", "sacct", "--store", store) == 2
    assert _train("--db", str(tmp_path / "none.sqlite"), "--store", store) == 2
    with pytest.raises(SystemExit) as usage:  # --keep 0: argparse's usage error
        _train("--db", str(db), "--store", store, "--keep", "0")
    assert usage.value.code == 2


def test_sweep_removes_only_stale_leftovers(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    target_dir = store.target_dir(Target.TIME)
    stale, fresh = target_dir / ".tmp-crashed", target_dir / ".tmp-writing"
    for path in (stale, fresh):
        path.mkdir(parents=True)
        (path / "q0.90.onnx").write_bytes(b"partial")
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    assert sweep(store, Target.TIME) == [".tmp-crashed"]
    assert fresh.is_dir() and not stale.exists()


def test_sweep_removes_stale_new_files_of_current_and_verdicts_only(tmp_path: Path) -> None:
    """A process killed while it replaced CURRENT or a promotion.json leaves the hidden new file
    (state_dir.replace_at's); nothing swept them, and nights of crashes piled them up."""
    store = ModelStore(tmp_path)
    target_dir = store.target_dir(Target.TIME)
    version = target_dir / "20261201T020000.000000Z"
    version.mkdir(parents=True)
    stale = [target_dir / ".CURRENT-0123456789ab", version / ".promotion.json-ba9876543210"]
    fresh = target_dir / ".CURRENT-fedcba987654"
    kept = [
        target_dir / ".CURRENT-notours",  # not a name replace_at makes
        version / ".card.json-0123456789ab",  # a card is never replaced
        target_dir / "CURRENT",
    ]
    for path in (*stale, fresh, *kept):
        path.write_bytes(b"20261201T020000.000000Z\n")
    directory = target_dir / ".CURRENT-aaaaaaaaaaaa"  # not a file: not replace_at's
    directory.mkdir()
    old = time.time() - STALE_TEMP_S - 60
    for path in (*stale, *kept, directory):
        os.utime(path, (old, old))
    removed = sweep(store, Target.TIME)
    assert sorted(removed) == sorted(str(p.relative_to(target_dir)) for p in stale)
    assert not any(p.exists() for p in stale)
    assert fresh.exists() and directory.is_dir() and all(p.exists() for p in kept)


def test_sweep_passes_over_what_vanishes_or_cannot_be_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a review: sweep lstat()ed every entry, so a rollback's .CURRENT- file renamed into
    place between the listing and the lstat (or a version it could not list) raised out of it, and
    the night's training of the target stopped there."""
    store = ModelStore(tmp_path)
    target_dir = store.target_dir(Target.TIME)
    version = target_dir / "20261201T020000.000000Z"
    version.mkdir(parents=True)
    gone, stale = target_dir / ".CURRENT-0123456789ab", target_dir / ".CURRENT-ba9876543210"
    for path in (gone, stale):
        path.write_bytes(b"x\n")
    old = time.time() - STALE_TEMP_S - 60
    os.utime(stale, (old, old))
    real_lstat, real_iterdir = Path.lstat, Path.iterdir

    def vanishing(path: Path) -> os.stat_result:
        if path == gone:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_lstat(path)

    def unlistable(path: Path) -> Iterator[Path]:
        if path == version:
            raise PermissionError(13, "Permission denied", str(path))
        return real_iterdir(path)

    monkeypatch.setattr(Path, "lstat", vanishing)
    monkeypatch.setattr(Path, "iterdir", unlistable)
    assert sweep(store, Target.TIME) == [stale.name]
    assert f"cannot list {version} for leftovers: [Errno 13] Permission denied" in caplog.text


def test_a_verdict_that_cannot_be_written_leaves_no_unjudged_version(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk fills between publishing a challenger and writing its promotion.json: a refused
    challenger without its verdict looked unjudged, and the daemon's fallback and `harp rollback`
    would take it. It is removed instead, the run exits 1 and the champion serves on."""
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 0
    champion = store.current_version(Target.TIME)
    assert champion is not None

    def disk_full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ModelStore, "write_verdict", disk_full)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--floor", "150") == 1
    assert "time: trained but not published" in caplog.text and "[Errno 28]" in caplog.text
    assert "cannot write the verdict on" in caplog.text and "removing it" in caplog.text
    assert store.versions(Target.TIME) == [champion]
    assert store.current_version(Target.TIME) == champion
    assert [p.name for p in store.target_dir(Target.TIME).iterdir() if p.name.startswith(".")] == []


def test_a_promotion_that_cannot_move_current_says_what_serves(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CURRENT cannot be replaced (disk full) after a promoting verdict: the run said "trained but
    not published", though the version was in the store, listed as promoted and served by nothing."""
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 0
    champion = store.current_version(Target.TIME)

    def disk_full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ModelStore, "set_current", disk_full)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 1
    newest = store.versions(Target.TIME)[-1]
    assert f"time: published {newest} but could not make it serve ([Errno 28]" in caplog.text
    assert "the serving version stays" in caplog.text and "not published" not in caplog.text
    note = store.verdict(Target.TIME, newest) or {}
    assert not note["promote"] and "CURRENT could not be moved to it" in note["reason"], note
    assert store.current_version(Target.TIME) == champion


def test_a_prune_that_fails_after_promoting_says_the_new_version_serves(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 0

    def cannot_rename(*args: object) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(pipeline, "prune", cannot_rename)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--keep", "1") == 1
    newest = store.versions(Target.TIME)[-1]
    assert f"time: published {newest} (serving it) but could not prune older versions" in caplog.text
    assert "not published" not in caplog.text
    assert store.current_version(Target.TIME) == newest


def test_a_second_run_on_a_held_store_exits_75_and_touches_nothing(
    db: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs at once on one store: one's prune could delete what the other had just published
    or promoted. Another process holds the store's lock: this run logs it and exits 75 at once."""
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _train("--db", str(db), "--store", str(store_dir), *FAST) == 0
    champion = store.current_version(Target.TIME)
    assert champion is not None
    hold = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.ftruncate(fd, 0)\n"
        "os.pwrite(fd, b'%d\\n' % os.getpid(), 0)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", hold, str(store_dir / LOCK_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as other:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--keep", "1") == 75
        assert f"held by another harp train or nightly (pid {other.pid})" in caplog.text
        assert "not training" in caplog.text
        assert store.versions(Target.TIME) == [champion]
        # Readers never take the lock: the daemon loads what CURRENT names while it is held.
        current = store.current_dir(Target.TIME)
        assert current is not None and QuantileModel.load(current, Target.TIME).version == champion
        assert other.stdin is not None
        other.stdin.close()
    assert other.returncode == 0
    # Released (or its holder gone): the next run trains; the lock file is no version to anyone.
    assert _train("--db", str(db), "--store", str(store_dir), *FAST, "--keep", "1") == 0
    assert (store_dir / LOCK_FILE).is_file()
    # --keep 1: the new serving version, and the one before it that the daemon's fallback serves.
    assert store.versions(Target.TIME)[0] == champion and len(store.versions(Target.TIME)) == 2
    capsys.readouterr()
    parser = argparse.ArgumentParser()
    models_command.register(parser.add_subparsers())
    args = parser.parse_args(["models", "--store", str(store_dir)])
    assert args.func(args) == 0
    assert LOCK_FILE not in capsys.readouterr().out


def test_the_writer_lock_excludes_a_second_holder_in_the_same_process(tmp_path: Path) -> None:
    store = ModelStore(tmp_path / "models")
    second = ModelStore(tmp_path / "models")
    with store.writer(), pytest.raises(StoreBusy, match=f"pid {os.getpid()}"), second.writer():
        pass
    with store.writer():  # released
        pass


def test_the_holder_named_is_the_first_line_of_the_lock_file(tmp_path: Path) -> None:
    """A holder that wrote its pid over a longer one without truncating leaves the longer pid's tail
    after its own line (pids wrap: pid_max may be 32768): the message names the holder alone."""
    store = ModelStore(tmp_path / "models")
    second = ModelStore(tmp_path / "models")
    with store.writer():
        (tmp_path / "models" / LOCK_FILE).write_bytes(b"412\n34\n")
        with pytest.raises(StoreBusy, match=r"\(pid 412\)$"), second.writer():
            pass
