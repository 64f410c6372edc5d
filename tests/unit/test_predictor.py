from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from slurm_harp.core.decision import Action, Reason
from slurm_harp.core.message import format_minutes
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.safety_rule import Calibration, Rung
from slurm_harp.core.tag import TAG_PREFIX, parse_tag
from tests.conftest import for_target


class FakeModel:
    def __init__(self, minutes: float, version: str = "time@1", fail: bool = False) -> None:
        self.version = version
        self.quantiles = (0.5, 0.9)
        self.minutes = minutes
        self.fail = fail
        self.calls = 0

    def predict_quantile(self, x: np.ndarray, quantile: float) -> np.ndarray:
        self.calls += 1
        if self.fail:
            raise RuntimeError("boom")
        return np.array([self.minutes * (1.0 if quantile == 0.9 else 0.5)])


def vectorize(requests: Sequence[JobRequest], history: np.ndarray | None = None, /) -> np.ndarray:
    return np.zeros((len(requests), 3), dtype=np.float32)


def test_no_model_answers_none_for_every_target() -> None:
    decision = Predictor(Policy(), vectorize).decide(JobRequest(time_limit_minutes=60))
    assert [t.reason for t in decision.targets] == [Reason.NO_MODEL] * 3
    assert decision.annotation == "" and decision.user_message == ""


def test_shadow_tags_without_changing() -> None:
    p = Predictor(Policy(default_mode=Mode.SHADOW), vectorize, {Target.TIME: FakeModel(44.2)})
    d = p.decide(JobRequest(time_limit_minutes=240))
    time = for_target(d, Target.TIME)
    assert time is not None and time.action is Action.ANNOTATE and time.quantile == 0.9
    assert d.annotation.startswith(TAG_PREFIX + "shadow,") and " " not in d.annotation
    assert "t=44/q0.9" in d.annotation and "v=time@1" in d.annotation
    assert d.user_message == ""


def test_rewrite_sets_value_and_tells_the_user() -> None:
    p = Predictor(Policy(default_mode=Mode.REWRITE), vectorize, {Target.TIME: FakeModel(44.2)})
    d = p.decide(JobRequest(time_limit_minutes=240))
    time = for_target(d, Target.TIME)
    assert time is not None and time.action is Action.REWRITE and time.new_value == 45
    assert d.user_message.startswith("harp: lowered time from 04:00:00 to 00:45:00")
    assert "\n" not in d.user_message
    assert "t!=45" in d.annotation


def test_policy_quantile_picks_nearest_model_quantile() -> None:
    p = Predictor(Policy(default_mode=Mode.SHADOW, quantile=0.6), vectorize, {Target.TIME: FakeModel(40)})
    time = for_target(p.decide(JobRequest(time_limit_minutes=240)), Target.TIME)
    assert time is not None and time.quantile == 0.5 and time.predicted == 20


def test_failing_model_degrades_to_no_action() -> None:
    p = Predictor(Policy(default_mode=Mode.REWRITE), vectorize, {Target.TIME: FakeModel(1, fail=True)})
    time = for_target(p.decide(JobRequest(time_limit_minutes=240)), Target.TIME)
    assert time is not None and (time.action, time.reason) == (Action.NONE, Reason.MODEL_ERROR)


@pytest.mark.parametrize("mode", [Mode.REWRITE, Mode.SHADOW])
@pytest.mark.parametrize("output", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_prediction_is_a_model_error_for_that_target_only(
    mode: Mode, output: float, caplog: pytest.LogCaptureFixture
) -> None:
    """NaN or an infinity out of a model raised out of Policy.decide (math.ceil) and failed the
    whole call; now that target is a model error, its request unchanged, the others served."""
    models = {Target.TIME: FakeModel(output), Target.MEMORY: FakeModel(2000.0, version="memory@1")}
    d = Predictor(Policy(default_mode=mode), vectorize, models).decide(
        JobRequest(time_limit_minutes=240, mem_per_node_mb=64000)
    )
    time, memory = for_target(d, Target.TIME), for_target(d, Target.MEMORY)
    assert time is not None and (time.action, time.reason) == (Action.NONE, Reason.MODEL_ERROR)
    assert time.new_value is None and time.detail == "NonFinitePrediction"
    assert memory is not None and memory.reason is not Reason.MODEL_ERROR
    assert "model time@1 failed for target time" in caplog.text and "time model predicted" in caplog.text
    # The calibrated path too, whether the rule would set a limit or keep the request.
    for penalty in (1.0, 30000.0):
        calibrated = CalibratedFake(output, penalty=penalty)
        d = Predictor(Policy(default_mode=mode), vectorize, {Target.TIME: calibrated}).decide(
            JobRequest(time_limit_minutes=240)
        )
        time = for_target(d, Target.TIME)
        assert time is not None and (time.action, time.reason) == (Action.NONE, Reason.MODEL_ERROR)


def test_off_mode_skips_the_model() -> None:
    model = FakeModel(10)
    p = Predictor(Policy(default_mode=Mode.OFF), vectorize, {Target.TIME: model})
    assert p.decide(JobRequest(time_limit_minutes=240)).mode == "off"
    assert model.calls == 0


def test_swap_replaces_models_and_policy_together() -> None:
    p = Predictor(Policy(default_mode=Mode.SHADOW), vectorize, {Target.TIME: FakeModel(10, "a")})
    p.swap(policy=Policy(default_mode=Mode.REWRITE), models={Target.TIME: FakeModel(10, "b")})
    d = p.decide(JobRequest(time_limit_minutes=240))
    assert d.mode == "rewrite" and "v=b" in d.annotation


@pytest.mark.parametrize(
    ("minutes", "text"), [(45, "00:45:00"), (61.5, "01:01:30"), (1440 + 90, "1-01:30:00")]
)
def test_minutes_use_slurm_spelling(minutes: float, text: str) -> None:
    assert format_minutes(minutes) == text


class CalibratedFake(FakeModel):
    """A model whose card carries the calibrated rule: one rung, margin 1.5 on "q0.95"."""

    def __init__(self, minutes: float, penalty: float = 0.0) -> None:
        super().__init__(minutes, version="time@cal")
        self.chosen = "q0.95"
        self.names = ("q0.95",)
        self.asked: list[tuple[str, ...]] = []
        self.calibration = Calibration(
            rungs=(Rung("q0.95", 1.5, 0.01),), penalty=penalty, floor=1.0, target=Target.TIME
        )

    def predict_row(self, x: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
        self.asked.append(names)
        return {name: self.minutes for name in names}


def test_calibrated_rule_sets_the_limit_and_the_policy_still_guards_it() -> None:
    p = Predictor(Policy(default_mode=Mode.REWRITE), vectorize, {Target.TIME: CalibratedFake(20.0)})
    time = for_target(p.decide(JobRequest(time_limit_minutes=240, min_cpus=4)), Target.TIME)
    assert time is not None and time.action is Action.REWRITE and time.new_value == 30  # 1.5 x 20
    assert time.quantile is None
    # The policy's floor is above the rule's: the policy wins.
    floored = Predictor(
        Policy(default_mode=Mode.REWRITE, floors={Target.TIME: 60.0}),
        vectorize,
        {Target.TIME: CalibratedFake(20.0)},
    ).decide(JobRequest(time_limit_minutes=240))
    assert for_target(floored, Target.TIME).new_value == 60  # type: ignore[union-attr]


def test_calibrated_rule_keeps_the_request_when_the_saving_does_not_pay() -> None:
    # Saving (240 - 30) x 1 core = 210 < penalty x risk = 30000 x 0.01 = 300: keep the request.
    model = CalibratedFake(20.0, penalty=30000.0)
    d = Predictor(Policy(default_mode=Mode.REWRITE), vectorize, {Target.TIME: model}).decide(
        JobRequest(time_limit_minutes=240, min_cpus=1)
    )
    time = for_target(d, Target.TIME)
    assert time is not None and (time.action, time.reason) == (Action.ANNOTATE, Reason.NO_GAIN)
    assert time.predicted == 20.0 and time.detail == "calibrated rule keeps the request"
    assert d.user_message == ""
    # A bigger job saves more per minute: now it pays.
    big = Predictor(Policy(default_mode=Mode.REWRITE), vectorize, {Target.TIME: model}).decide(
        JobRequest(time_limit_minutes=240, min_cpus=64)
    )
    assert for_target(big, Target.TIME).action is Action.REWRITE  # type: ignore[union-attr]
    assert "(calibrated on similar past jobs)" in big.user_message


def test_calibrated_rule_in_shadow_only_annotates() -> None:
    d = Predictor(Policy(default_mode=Mode.SHADOW), vectorize, {Target.TIME: CalibratedFake(20.0)}).decide(
        JobRequest(time_limit_minutes=240)
    )
    time = for_target(d, Target.TIME)
    assert time is not None and time.action is Action.ANNOTATE and time.predicted == 30.0
    assert "t=30," in d.annotation


def test_shadow_marks_the_values_a_changing_mode_would_keep() -> None:
    # The rule keeps this request (see above): shadow says so with /k, for harp report.
    model = CalibratedFake(20.0, penalty=30000.0)
    d = Predictor(Policy(default_mode=Mode.SHADOW), vectorize, {Target.TIME: model}).decide(
        JobRequest(time_limit_minutes=240, min_cpus=1)
    )
    time = for_target(d, Target.TIME)
    assert time is not None and time.kept and time.action is Action.ANNOTATE
    assert ",t=20/k," in d.annotation
    tag = parse_tag(d.annotation)
    assert tag is not None and tag.kept == {"t"} and tag.values["t"] == 20
    # One it would apply carries no mark.
    applied = Predictor(Policy(default_mode=Mode.SHADOW), vectorize, {Target.TIME: model}).decide(
        JobRequest(time_limit_minutes=240, min_cpus=64)
    )
    assert "/k" not in applied.annotation
    assert parse_tag(applied.annotation).kept == frozenset()  # type: ignore[union-attr]


def test_calibrated_rule_prices_a_job_with_its_partitions_risk() -> None:
    """A rule calibrated per partition (`--calibrate-by partition`): the job's own partition's risk
    decides; a partition without risks of its own, or none given, gets the window's."""
    model = CalibratedFake(20.0, penalty=10000.0)  # window risk 0.01: 100 core-min < 210 saved
    model.calibration = replace(model.calibration, by="partition", group_risks={"debug": (0.05,)})
    p = Predictor(Policy(default_mode=Mode.REWRITE), vectorize, {Target.TIME: model})
    for partition, action in (("debug", Action.ANNOTATE), ("batch", Action.REWRITE), (None, Action.REWRITE)):
        d = p.decide(JobRequest(time_limit_minutes=240, min_cpus=1, partition=partition))
        assert for_target(d, Target.TIME).action is action, partition  # type: ignore[union-attr]
    # 500 core-min of risk on "debug": no rung can pay for it, so no model runs at all.
    model.asked.clear()
    p.decide(JobRequest(time_limit_minutes=240, min_cpus=1, partition="debug"))
    assert model.asked == [("q0.95",)]  # the chosen model only, for the annotation
