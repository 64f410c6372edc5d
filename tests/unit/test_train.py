from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.accounting import SACCT_FIELDS, JobRecord
from slurm_harp.accounting import sacct_runner as sacct_module
from slurm_harp.accounting.swf import parse_swf
from slurm_harp.commands import method
from slurm_harp.commands import train as train_command
from slurm_harp.config import parse
from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.safety_rule import Calibration, ladder_limits
from slurm_harp.learning import booster, card_sections
from slurm_harp.learning.booster import BoosterParams
from slurm_harp.learning.calibration import CalibrationConfig
from slurm_harp.learning.dataset import build_dataset, row_order
from slurm_harp.learning.family import FamilyConfig, fit_family, side_rounds
from slurm_harp.learning.fitting import Fitted, MethodConfig, fit_and_calibrate, predict_units
from slurm_harp.learning.member import Member
from slurm_harp.learning.targets import TargetData, target_data, usable_in_order
from slurm_harp.learning.trainer import NotEnoughData, TrainingError, split_rows, train_target
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore
from tests.conftest import BUNDLED_TRACE, delimited
from tests.training_helpers import train_walltime

KTH = BUNDLED_TRACE  # in the package: these tests run in every checkout
FAST = BoosterParams(n_estimators=40, num_leaves=15)


def synthetic(n: int, seed: int = 0, censored_every: int = 10) -> list[JobRecord]:
    """Users with their own typical run time; every ``censored_every``-th job hit its limit."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        user = int(rng.integers(0, 8))
        limit_min = 30 * (user + 1)
        run = float(np.clip(rng.lognormal(np.log(limit_min * 60 / 4), 0.5), 1, limit_min * 60))
        censored = i % censored_every == 0
        if censored:
            run = limit_min * 60
        out.append(
            JobRecord(
                job_id=str(i),
                request=JobRequest(
                    user_name=f"user{user}",
                    time_limit_minutes=limit_min,
                    min_cpus=int(rng.integers(1, 9)),
                    submit_time=1_700_000_000 + 60 * i,
                ),
                state="TIMEOUT" if censored else "COMPLETED",
                elapsed_s=int(run),
                end_time=1_700_000_000 + 60 * i + int(run),
                censored=censored,
            )
        )
    return out


def kth_slice(lines: int) -> list[JobRecord]:
    with gzip.open(KTH, "rt") as handle:
        return parse_swf(itertools.islice(handle, lines))


def kth_file(directory: Path, lines: int) -> Path:
    """The first ``lines`` lines of the KTH trace as an SWF file in ``directory``."""
    source = directory / "kth.swf"
    with gzip.open(KTH, "rt") as handle:
        source.write_text("".join(itertools.islice(handle, lines)))
    return source


def test_dataset_is_chronological_and_keeps_censored_jobs() -> None:
    records = synthetic(500)
    shuffled = list(reversed(records))
    data = build_dataset(shuffled)
    assert len(data) == 500
    assert np.all(np.diff(data.submit_time) >= 0)
    assert int(data.censored.sum()) == 50  # censored jobs are kept, with their observed time
    rows = split_rows(data, 0.2)
    assert len(rows.validation) == 100
    assert data.submit_time[rows.train].max() < data.submit_time[rows.validation].min()
    # Training only knows jobs that had ended when the validation window opened.
    assert np.nanmax(data.end_time[rows.train]) <= rows.cutoff
    assert len(rows.train) + rows.dropped == 400 and rows.dropped > 0
    assert len(build_dataset(records, max_rows=100)) == 100
    assert build_dataset(records, max_rows=100).submit_time[0] == records[400].request.submit_time


def test_a_job_held_under_two_sources_is_one_row(caplog: pytest.LogCaptureFixture) -> None:
    """Saved sacct text imported over the range the harvest read is a second copy of each job (a
    source of its own): the training rows, and their history features, counted each job twice."""
    records = synthetic(300)
    copies = [dataclasses.replace(r, max_rss_mb=1.0) for r in records[100:200]]
    again = dataclasses.replace(records[5], request=dataclasses.replace(records[5].request, submit_time=None))
    reused = dataclasses.replace(records[6], request=dataclasses.replace(records[6].request, submit_time=1))
    mixed = sorted([*records, *copies, again, reused], key=lambda r: r.request.submit_time or 0)
    data = build_dataset(mixed)
    assert len(data) == 302 and row_order(mixed) == row_order(mixed)
    kept = [mixed[i] for i in row_order(mixed)]
    assert len({(r.job_id, r.request.submit_time) for r in kept}) == 302  # each job once
    assert sum(r.max_rss_mb == 1.0 for r in kept) == 0  # the first record of each is the row
    expected = build_dataset([*records, again, reused])
    np.testing.assert_array_equal(data.x, expected.x)  # history as over one copy
    assert "100 jobs are held twice (the same job id and submit time, under two sources" in caplog.text


def test_train_publish_load_predict_round_trip(tmp_path: Path) -> None:
    records = kth_slice(4000)
    result = train_walltime(records, (0.5, 0.9), source="slice", params=FAST)
    card = result.card
    assert card["features"] == list(FEATURE_NAMES)
    assert card["transform"] == "log1p_seconds" and card["target"] == "time"
    assert [q["quantile"] for q in card["quantiles"]] == [0.5, 0.9]
    assert card["parity_max_abs_error"] < 1e-4
    assert card["training"]["censored_train"] > 0
    assert card["training"]["rows_train"] + card["training"]["rows_validation"] <= len(records)
    assert set(card["validation"]) == {"0.50", "0.90", "request"}
    assert 0 <= card["validation"]["0.90"]["upp"] <= card["validation"]["0.50"]["upp"] <= 100
    assert set(card["libraries"]) == {"lightgbm", "onnx", "onnxruntime", "onnxmltools", "numpy", "python"}

    store = ModelStore(tmp_path)
    version = store.publish(Target.TIME, result.files, card)
    current = store.current_dir(Target.TIME)
    assert current is not None
    model = QuantileModel.load(current)
    assert (model.target, model.version, model.quantiles) == (Target.TIME, version, (0.5, 0.9))
    assert json.loads((tmp_path / "time" / version / "card.json").read_text())["validation"]

    # The served predictions are the native model's, in minutes.
    data = build_dataset(records)
    x = data.x[-300:]
    # Once the rule is calibrated the published models are refitted on every job (Refit.FULL, the default).
    train = data
    # The 0.9 model as the family fits it: quantile trees, then the censored refinement.
    native = fit_family(
        train.x,
        np.log1p(train.elapsed_s),
        train.censored,
        np.ones(len(train)),
        FamilyConfig(quantiles=(0.9,), compare=(), params=FAST),
    )[0]
    expected = np.expm1(native.predict(x)) / 60
    served = model.predict(x)
    assert served[0.9].shape == (300,)
    assert np.all(served[0.9] >= served[0.5])
    assert np.all(served[0.5] >= 0)
    # Crossing quantiles are rearranged: the served 0.9 is the larger of the raw 0.5 and 0.9.
    raw_median = model.predict_quantile(x, 0.5)
    np.testing.assert_allclose(served[0.9], np.maximum(expected, raw_median), rtol=1e-3, atol=1e-3)


def test_parity_failure_stops_training(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(booster, "parity_error", lambda model, data, x: 0.5)
    with pytest.raises(TrainingError, match="differs from LightGBM"):
        train_walltime(synthetic(300), (0.9,), params=FAST)


def test_too_little_data_and_bad_quantiles() -> None:
    with pytest.raises(TrainingError, match="not enough jobs"):
        train_walltime(synthetic(30), params=FAST)
    with pytest.raises(TrainingError, match="not enough jobs"):
        train_walltime([], params=FAST)
    with pytest.raises(TrainingError, match="quantiles"):
        train_walltime(synthetic(300), (0.5, 1.5), params=FAST)


def _job(i: int, user: str, run_s: int, limit_min: int, censored: bool = False) -> JobRecord:
    submit = 1_700_000_000 + 60 * i
    request = JobRequest(user_name=user, time_limit_minutes=limit_min, min_cpus=1, submit_time=submit)
    state = "TIMEOUT" if censored else "COMPLETED"
    return JobRecord(str(i), request, state, elapsed_s=run_s, end_time=submit + run_s, censored=censored)


def test_a_validation_window_of_jobs_that_all_hit_their_limit_is_not_enough() -> None:
    """240 jobs run 1-50 of their 60 minutes, then 60 time out. Calibration saw no waste to cut,
    kept penalty 0 with every rung, and the card's rule lowered all 60 window jobs to 17 minutes,
    below the run of 68 % of the finished jobs (audit: censored_val.py)."""
    rng = np.random.default_rng(1)
    records = [
        _job(i, f"u{i % 5}", int(rng.integers(60, 3000)) if i < 240 else 3600, 60, censored=i >= 240)
        for i in range(300)
    ]
    config = MethodConfig(family=FamilyConfig(params=FAST, quantiles=(0.5, 0.9), compare=()))
    with pytest.raises(NotEnoughData, match=r"for time: .* 0 of 60 validation jobs that finished .*60 hit"):
        train_target(records, Target.TIME, config)


def test_a_window_where_no_rung_cuts_publishes_a_rule_that_never_rewrites() -> None:
    """320 batch jobs ask 600 minutes and run 1-50, then a quiet spell of debug jobs asks 10 and
    runs 1-9: on validation no rung cuts anything. The rule kept penalty 0 with every rung, and
    on the next 200 batch jobs lowered all of them, newly killing 46 % (audit: flat_cut.py)."""
    rng = np.random.default_rng(2)
    records = [
        _job(
            i,
            f"u{i % 4}",
            int(rng.integers(60, 3000)) if i < 320 else int(rng.integers(60, 540)),
            600 if i < 320 else 10,
        )
        for i in range(400)
    ]
    later = [_job(400 + i, f"u{i % 4}", int(rng.integers(60, 3000)), 600) for i in range(200)]
    config = MethodConfig(
        family=FamilyConfig(params=FAST, quantiles=(0.5, 0.9), compare=()),
        calibration=CalibrationConfig(kill_budget=0.05),  # one its 80 validation jobs can show met
    )
    data = build_dataset(records)
    td = target_data(records, data, Target.TIME)
    rows = split_rows(data, 0.2)
    fitted = fit_and_calibrate(data.x, td, rows.train, rows.validation, config)
    assert fitted.calibration.rungs == () and fitted.figures["waste_cut_pct"] == 0.0
    assert fitted.figures["jobs"] >= fitted.figures["jobs_needed"]  # no rung cuts: not too few jobs
    every = records + later
    data = build_dataset(every)
    td = target_data(every, data, Target.TIME).take(np.arange(400, 600))
    predictions = predict_units(fitted.members, fitted.members, data.x[400:], td)
    limits = ladder_limits(predictions, td.requested, td.weight, fitted.calibration, td.group)
    assert np.isnan(limits).all()


def test_a_store_too_small_to_show_the_kill_budget_met_publishes_a_rule_that_never_rewrites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first night on 300 KTH jobs: the rule was calibrated on their 60 latest, where "within
    1 % in each of 4 parts" only meant no kill seen, and published with 10 rungs, "0.00 % newly
    killed"; served on the 1000 jobs after them it newly killed 8.1 % (audit: e2e_nightly.sh,
    small_window.py). No kill in n jobs bounds the rate only below about 3/n: on fewer than 300
    jobs at 1 % the rule now never rewrites, and the card and the printed summary say why."""
    with gzip.open(KTH, "rt") as handle:
        lines = handle.readlines()
    source = tmp_path / "slice.swf"
    jobs = [line for line in lines if not line.startswith(";")][15000:15300]
    source.write_text("".join([line for line in lines if line.startswith(";")] + jobs))
    store = ModelStore(tmp_path / "store")
    argv = ("--source", str(source), "--store", str(store.root), "--compare", "none")
    assert _run_cli(*argv) == 0
    out = capsys.readouterr().out
    rule = json.loads(
        (store.target_dir(Target.TIME) / store.versions(Target.TIME)[-1] / "card.json").read_text()
    )["calibration"]
    assert rule["rungs"] == [] and rule["penalty"] == 0.0
    assert (rule["validation"]["jobs"], rule["validation"]["jobs_needed"]) == (60, 300)
    said = "the rule never rewrites: 60 usable validation jobs, 300 needed to show at most 1 % newly killed"
    assert rule["too_few_jobs"].startswith(said) and f"\n  {said}" in out
    # A budget 60 jobs can show met (5 %) is calibrated on them as before.
    assert _run_cli(*argv, "--kill-budget", "0.05") == 0
    rule = json.loads(
        (store.target_dir(Target.TIME) / store.versions(Target.TIME)[-1] / "card.json").read_text()
    )["calibration"]
    assert rule["rungs"] and "too_few_jobs" not in rule


def test_the_cards_row_counts_count_the_same_jobs_in_both_windows() -> None:
    """rows_train counted the jobs with an observed value, rows_validation and censored_validation
    every job of the window: LANL memory gave rows_validation 1191 where 1020 had a value (audit:
    card_rows.py). Every third job here has no TotalCPU, every fifth timed out."""
    records = [
        dataclasses.replace(
            _job(i, f"u{i % 4}", 600, 60, censored=i % 5 == 0),
            total_cpu_s=None if i % 3 == 0 else 300.0,
            alloc_cpus=1,
        )
        for i in range(300)
    ]
    data = build_dataset(records)
    rows = split_rows(data, 0.2)
    counts = card_sections.window(data, target_data(records, data, Target.CPUS), rows, "s", 0.0)
    observed = [r for r in usable_in_order(records)[rows.validation[0] :] if r.total_cpu_s is not None]
    assert counts["rows_validation"] == len(observed) < len(rows.validation)
    assert counts["censored_validation"] == 0  # a job is never censored for its CPUs
    counts = card_sections.window(data, target_data(records, data, Target.TIME), rows, "s", 0.0)
    assert counts["rows_validation"] == len(rows.validation)
    assert counts["censored_validation"] == sum(r.censored for r in usable_in_order(records)[-60:]) > 0


def test_the_cards_quantile_figures_are_each_model_alone_as_served() -> None:
    """The card scored the quantile models sorted across quantiles per row, while the daemon's
    quantile path (model.runtime predict_quantile) serves one model unsorted: on KTH 8 k, q0.99
    newly killed 1.15 % on the card, 1.98 % as served (audit: cross.py)."""
    n = 8
    td = TargetData(
        target=Target.TIME,
        value=np.full(n, 50.0),
        censored=np.zeros(n, dtype=bool),
        requested=np.full(n, 100.0),
        weight=np.ones(n),
        waste_weight=np.ones(n),
        cost=np.full(n, 100.0),
        group=np.full(n, "", dtype=object),
    )
    low, high = np.full(n, 40.0), np.full(n, 60.0)  # the 0.9 model under the run, the 0.5 over it
    members = {
        "q0.50": Member("q0.50", "quantile", 0.5, None),
        "q0.90": Member("q0.90", "quantile", 0.9, None),
    }
    fitted = Fitted(
        Target.TIME,
        members,
        "q0.90",
        {},
        Calibration((), 0.0, 1.0, Target.TIME),
        {},
        {"q0.50": high, "q0.90": low},
        {},
    )
    card = card_sections.legacy_validation(fitted, td)
    assert card["0.90"]["upp"] == 100.0 and card["0.90"]["newly_killed_pct"] == 100.0
    assert card["0.50"]["upp"] == 0.0 and card["0.50"]["waste_cut_pct"] == pytest.approx(80.0)


def _run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    train_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["train", *argv])
    code: int = args.func(args)
    return code


def test_cli_trains_from_a_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = kth_file(tmp_path, 1500)
    store = tmp_path / "store"
    assert _run_cli("--source", str(source), "--store", str(store), "--quantiles", "0.9") == 0
    out = capsys.readouterr().out
    version = ModelStore(store).current_version("time")
    assert version is not None and f"published time model {version}" in out
    assert "q0.90" in out and "upp=" in out and "request" in out


def test_cli_trains_every_available_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = kth_file(tmp_path, 1500)
    store = tmp_path / "store"
    argv = ["--source", str(source), "--store", str(store), "--target", "all", "--compare", "linear"]
    assert _run_cli(*argv, "--kill-budget", "0.02") == 0
    out = capsys.readouterr().out
    # KTH has run times but neither memory nor CPU time: only time is published.
    assert "published time model" in out and "chosen by wtm on validation" in out and "safety rule" in out
    assert ModelStore(store).versions("memory") == [] and ModelStore(store).versions("cpus") == []
    card = json.loads((ModelStore(store).current_dir("time") / "card.json").read_text())  # type: ignore[operator]
    assert card["calibration"]["kill_budget"] == 0.02 and card["calibration"]["floor"] == 1.0
    assert set(card["selection"]["table"]) == {
        "q0.50",
        "q0.70",
        "q0.80",
        "q0.90",
        "q0.95",
        "q0.98",
        "q0.99",
        "linear",
    }
    with pytest.raises(SystemExit):
        _run_cli(*argv, "--compare", "forest")
    with pytest.raises(SystemExit):
        _run_cli(*argv, "--select", "speed,upp")
    assert _run_cli(*argv, "--target", "time", "--select", "aea,upp,0", "--promote", "always") == 0
    card = json.loads((ModelStore(store).current_dir("time") / "card.json").read_text())  # type: ignore[operator]
    policy = card["selection"]["policy"]
    assert (policy["name"], policy["primary"], policy["tolerance"]) == ("custom", "aea", 0.0)
    best_aea = max(stats["aea"] for stats in card["selection"]["table"].values())
    assert card["selection"]["table"][card["selection"]["chosen"]]["aea"] == best_aea


def test_cli_from_live_sacct_with_env_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ["|".join(SACCT_FIELDS)]
    for record in synthetic(300):
        values = dict.fromkeys(SACCT_FIELDS, "")
        values.update(
            JobIDRaw=record.job_id,
            JobID=record.job_id,
            User=record.request.user_name or "",
            State=record.state,
            ElapsedRaw=str(record.elapsed_s),
            TimelimitRaw=str(record.request.time_limit_minutes),
            ReqCPUS=str(record.request.min_cpus),
            Submit="2024-03-01T10:00:00",
        )
        lines.append("|".join(values[f] for f in SACCT_FIELDS))
    seen: list[Sequence[str]] = []

    def fake_sacct(argv: Sequence[str]) -> str:
        seen.append(argv)
        return delimited("\n".join(lines) + "\n", argv)

    monkeypatch.setattr(sacct_module, "run_sacct", fake_sacct)
    monkeypatch.setenv("HARP_STORE", str(tmp_path / "envstore"))
    assert _run_cli("--source", "sacct", "--sacct-start", "2024-03-01") == 0
    assert seen[0][seen[0].index("-S") + 1] == "2024-03-01"
    assert ModelStore(tmp_path / "envstore").current_dir("time") is not None
    assert "published time model" in capsys.readouterr().out


def test_cli_refuses_what_it_cannot_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARP_STORE", raising=False)
    assert _run_cli("--source", "x.swf") == 2  # no store
    assert _run_cli("--source", str(tmp_path / "missing.swf"), "--store", str(tmp_path)) == 2
    with pytest.raises(SystemExit):
        _run_cli("--source", "sacct", "--store", str(tmp_path), "--quantiles", "0.5,2")
    for bad in (
        ["--trees", "0"],
        ["--trees", "many"],
        ["--learning-rate", "0"],
        ["--learning-rate", "1.5"],
        ["--ladder-rows", "0"],
        ["--calibrate-by", "user"],
    ):
        with pytest.raises(SystemExit):
            _run_cli("--source", "sacct", "--store", str(tmp_path), *bad)
    empty = tmp_path / "empty.swf"
    empty.write_text("; nothing\n")
    assert _run_cli("--source", str(empty), "--store", str(tmp_path / "s")) == 1  # no data to train
    assert ModelStore(tmp_path / "s").versions("time") == []


def test_tree_settings_agree_and_scale_the_side_fits() -> None:
    """The CLI's and the config's defaults are the boosters' own; a site's number of trees scales
    the censored refinement and the custom-loss start with it (a quarter each)."""
    default = BoosterParams()
    assert (default.n_estimators, default.learning_rate) == (method.TREES, method.LEARNING_RATE)
    settings = parse({}).training
    assert (settings.trees, settings.learning_rate) == (default.n_estimators, default.learning_rate)
    family = FamilyConfig()
    assert family.ladder_max_rows == method.LADDER_ROWS == settings.ladder_rows
    assert CalibrationConfig().by == settings.calibrate_by == "none"
    assert (
        family.censored_rounds
        == family.start_rounds
        == family.update_rounds
        == side_rounds(default.n_estimators)
    )
    config = method.method_config(
        (0.9,),
        (),
        ("upp", "ov_mape", 1.0),
        0.01,
        1.0,
        2,
        trees=40,
        learning_rate=0.2,
        ladder_rows=500,
        calibrate_by="partition",
    )
    params = config.family.params
    assert (params.n_estimators, params.learning_rate, params.n_jobs) == (40, 0.2, 2)
    assert config.family.ladder_max_rows == 500 and config.calibration.by == "partition"
    assert config.family.censored_rounds == config.family.start_rounds == 10
