"""The gRPC adapter's own bookkeeping: a request that does not parse is answered and counted."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, TargetDecision
from slurm_harp.core.features import vectorize
from slurm_harp.core.memory_default import MemoryDefaults
from slurm_harp.core.policy import Mode, Policy, Rule
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.request import Target
from slurm_harp.server.service import PredictorService
from slurm_harp.server.serving_metrics import ServingMetrics


class Unasked:
    """Stands in for the Predictor: a request that does not parse never reaches it."""

    memory_defaults = MemoryDefaults()

    def decide(self, request: object) -> None:
        raise AssertionError(f"asked to decide {request!r}")


def test_a_request_that_does_not_parse_is_counted_and_logged_by_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    service = PredictorService(Unasked(), ServingMetrics(registry))  # type: ignore[arg-type]
    body = b"\xff\xff\xff\xff\xff"
    with caplog.at_level(logging.WARNING):
        reply = pb.Decision.FromString(service.predict(body))
    assert reply.mode == "off" and {t.reason for t in reply.targets} == {pb.REASON_BAD_REQUEST}
    assert registry.get_sample_value("harp_bad_requests_total") == 1.0
    assert registry.get_sample_value("harp_predict_failures_total") == 0.0
    assert "bad request (5 bytes) answered with no action" in caplog.text


def test_the_predictor_failing_is_a_failure_not_a_bad_request(caplog: pytest.LogCaptureFixture) -> None:
    class Failing:
        memory_defaults = MemoryDefaults()

        def decide(self, request: object) -> None:
            raise RuntimeError("boom")

    registry = CollectorRegistry()
    service = PredictorService(Failing(), ServingMetrics(registry))  # type: ignore[arg-type]
    body = pb.SubmitRequest(time_limit_minutes=60).SerializeToString()
    reply = pb.Decision.FromString(service.predict(body))
    assert reply.mode == "off" and not reply.targets
    assert registry.get_sample_value("harp_predict_failures_total") == 1.0
    assert registry.get_sample_value("harp_bad_requests_total") == 0.0
    assert "Predict failed; answering with no action" in caplog.text


def test_a_decision_no_field_holds_is_a_failure_answered_with_no_action(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A memory ask of mem_per_cpu x CPUs can pass 2^64 MB; a new value that large does not encode."""

    class Huge:
        memory_defaults = MemoryDefaults()

        def decide(self, request: object) -> Decision:
            big = TargetDecision(Target.MEMORY, Action.REWRITE, new_value=2**64)
            return Decision(targets=(big,), mode="rewrite")

    registry = CollectorRegistry()
    service = PredictorService(Huge(), ServingMetrics(registry))  # type: ignore[arg-type]
    reply = pb.Decision.FromString(service.predict(pb.SubmitRequest(min_cpus=2).SerializeToString()))
    assert reply.mode == "off" and not reply.targets
    assert registry.get_sample_value("harp_predict_failures_total") == 1.0
    assert "decision not encodable; answering with no action" in caplog.text


class Sixty:
    """A quantile time model predicting 60 minutes for every job."""

    version = "time@stub"
    quantiles = (0.9,)

    def predict_quantile(self, _features: object, _quantile: float) -> np.ndarray:
        return np.array([60.0])


@pytest.mark.parametrize(
    ("listed", "served"),
    [
        ("batch,critical", True),
        ("batch," * 40 + "critical," + "x" * 6, True),  # 255 bytes: carried whole
        ("batch," * 42 + "critical", False),  # 260 bytes: 'critical' past the cut
        ("," * 250 + "critical", False),  # empty entries, which Slurm accepts
        ("é" * 124 + ",critical", False),  # 133 characters, 257 bytes
    ],
    ids=["short", "255 bytes", "260 bytes", "empty entries", "multi-byte"],
)
def test_a_partition_list_longer_than_a_request_carries_gets_no_action(
    caplog: pytest.LogCaptureFixture, listed: str, served: bool
) -> None:
    """A rule keeps `critical` off; the default rewrites. Cut at 255 bytes, the list lost
    `critical` and the job was rewritten, though Slurm may run it there."""
    policy = Policy(
        default_mode=Mode.REWRITE,
        rules=(Rule(Mode.OFF, partition="critical"),),
        require_history=False,
        limits="quantile",
    )
    registry = CollectorRegistry()
    predictor = Predictor(policy, vectorize, models={Target.TIME: Sixty()})  # type: ignore[dict-item]
    service = PredictorService(predictor, ServingMetrics(registry))
    body = pb.SubmitRequest(user_name="alice", partition=listed, time_limit_minutes=1440)
    with caplog.at_level(logging.WARNING):
        reply = pb.Decision.FromString(service.predict(body.SerializeToString()))
    time = next(t for t in reply.targets if t.target == pb.TARGET_TIME)
    assert time.action == pb.ACTION_NONE and reply.mode == "off"
    if served:
        assert time.reason == pb.REASON_POLICY_OFF and not caplog.text
    else:
        assert {t.reason for t in reply.targets} == {pb.REASON_BAD_REQUEST}
        assert time.detail == "PartitionListTooLong"
        assert registry.get_sample_value("harp_bad_requests_total") == 1.0
        size = len(listed.encode())
        assert f"a partition list of {size} bytes, over the 255 a request carries" in caplog.text
