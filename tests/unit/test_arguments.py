"""commands.arguments: the shared value types, and the numeric options that use them refusing
infinities, NaN and absurd sizes as usage errors (exit 2, the option named), never a traceback."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.commands import harvest as harvest_command
from slurm_harp.commands.arguments import MAX_SPAN_S, span, unix_time, whole


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `harp ARGV` says on stderr, having exited 2 as argparse does for a usage error."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_a_span_is_finite_positive_and_at_most_ten_years() -> None:
    hours = span(3600)
    assert hours("24") == 24.0 and hours(str(MAX_SPAN_S / 3600)) == MAX_SPAN_S / 3600
    for bad in ("0", "-1", "nan", "inf", "1e308", str(MAX_SPAN_S / 3600 + 1), "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            hours(bad)
    assert span(1, zero=True)("0") == 0.0


def test_a_span_may_have_a_least() -> None:
    hours = span(3600, least_s=60)
    assert hours(str(60 / 3600)) == 60 / 3600 and hours("24") == 24.0
    for bad in ("0.0166", "1e-9", "0", "nan", str(MAX_SPAN_S / 3600 + 1)):
        with pytest.raises(argparse.ArgumentTypeError, match=r"must be at least 0\.01667 \(60 s\)"):
            hours(bad)


def test_a_harvest_window_below_a_minute_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--window-hours 1e-9 made windows of one second: a first run of 30 days, 2.6 million sacct calls."""
    monkeypatch.setattr(harvest_command, "harvest_into", lambda *a, **k: pytest.fail("harvested"))
    said = usage_error(["harvest", "--db", "/nonexistent/j.sqlite", "--window-hours", "1e-9"], capsys)
    assert "--window-hours: must be at least 0.01667 (60 s) and at most 87840 (ten years): '1e-9'" in said


def test_whole_numbers_and_unix_times() -> None:
    assert whole("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 0"):
        whole("-5")
    assert unix_time(datetime(1970, 1, 1, tzinfo=UTC), "1970-01-01Z") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="before 1970-01-01 UTC"):
        unix_time(datetime(1, 1, 1), "0001-01-01")
    with pytest.raises(argparse.ArgumentTypeError, match="before 1970-01-01 UTC"):
        unix_time(float("nan"), "nan")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "t.swf", "--period-days", "1e308"], "--period-days: must be > 0 and at most 3660"),
        (["simulate", "t.swf", "--period-days", "nan"], "--period-days: must be > 0"),
        (["simulate", "t.swf", "--bf-interval", "-5"], "--bf-interval: must be >= 0"),
        (
            ["evaluate", "t.swf", "--max-jobs", "-3"],
            "--max-jobs: must be a whole number from 1 to 2147483647",
        ),
        (["evaluate", "t.swf", "--split", "nan,0.2"], "--split: need train > 0"),
        (["nightly", "--settle-seconds", "inf"], "--settle-seconds: must be >= 0"),
        (["train", "t.swf", "--floor", "nan"], "--floor: must be a finite number > 0"),
        (["train", "t.swf", "--floor", "0"], "--floor: must be a finite number > 0"),
        (["train", "t.swf", "--tolerance", "inf"], "--tolerance: must be a finite number >= 0"),
        (["train", "t.swf", "--keep", "0"], "--keep: must be a whole number from 1 to 2147483647"),
        (["train", "t.swf", "--max-rows", "-10"], "--max-rows: must be a whole number from 1 to 2147483647"),
        (["train", "t.swf", "--threads", "-2"], "--threads: must be a whole number from 1 to 256"),
        (["train", "t.swf", "--threads", "99999999999"], "--threads: must be a whole number from 1 to 256"),
        (
            ["train", "t.swf", "--trees", "99999999999999999999"],
            "--trees: must be a whole number from 1 to 100000",
        ),
        (["evaluate", "t.swf", "--trees", "100001"], "--trees: must be a whole number from 1 to 100000"),
        (
            ["train", "t.swf", "--max-rows", "9" * 40],
            "--max-rows: must be a whole number from 1 to 2147483647",
        ),
        (["train", "t.swf", "--trees", "\uff14"], "--trees: not a whole number"),
        (["demo", "--holdout", "nan"], "--holdout: must be in (0, 1)"),
        (["demo", "--holdout", "1"], "--holdout: must be in (0, 1)"),
        (["demo", "--show", "-1"], "--show: must be >= 0"),
        (["train", "--quantiles", "0.5,1e-320"], "--quantiles: quantiles must lie in [0.000001, 0.999999]"),
        (["train", "--quantiles", "0.99999999"], "--quantiles: quantiles must lie in"),
        (["train", "--quantiles", "0.9,0.1234567"], "--quantiles: quantiles have at most six significant"),
        (["evaluate", "t.swf", "--seed", "-1"], "--seed: must be a whole number from 0 to 2147483647"),
        (["evaluate", "t.swf", "--seed", "2147483648"], "--seed: must be a whole number from 0 to"),
        (["evaluate", "t.swf", "--seed", "1.5"], "--seed: not a whole number"),
    ],
)
def test_numeric_options_refuse_what_is_no_number_of_theirs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in usage_error(argv, capsys)


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`--log-level garbage` ended every command in logging's ValueError traceback."""
    said = usage_error(["--log-level", "garbage", "models", "--store", "/nonexistent"], capsys)
    assert "argument --log-level: not a log level: 'garbage' (one of DEBUG, INFO, WARNING" in said


def test_an_unknown_harp_log_level_is_named_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in a unit's Environment=HARP_LOG_LEVEL= was a traceback at each start (a restart
    loop); it is one line naming the variable, exit 2. --log-level overrides it, in any case."""
    monkeypatch.setenv("HARP_LOG_LEVEL", "verbose")
    assert main(["models", "--store", str(tmp_path)]) == 2
    levels = "DEBUG, INFO, WARNING, ERROR, CRITICAL"
    assert capsys.readouterr().err == f"harp: $HARP_LOG_LEVEL: not a log level: 'verbose' (one of {levels})\n"
    assert main(["--log-level", "Warning", "models", "--store", str(tmp_path)]) == 0
