"""The gRPC adapter's own bookkeeping: a request that does not parse is answered and counted."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, TargetDecision
from slurm_harp.core.request import Target
from slurm_harp.server.service import PredictorService
from slurm_harp.server.serving_metrics import ServingMetrics


class Unasked:
    """Stands in for the Predictor: a request that does not parse never reaches it."""

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
        def decide(self, request: object) -> Decision:
            big = TargetDecision(Target.MEMORY, Action.REWRITE, new_value=2**64)
            return Decision(targets=(big,), mode="rewrite")

    registry = CollectorRegistry()
    service = PredictorService(Huge(), ServingMetrics(registry))  # type: ignore[arg-type]
    reply = pb.Decision.FromString(service.predict(pb.SubmitRequest(min_cpus=2).SerializeToString()))
    assert reply.mode == "off" and not reply.targets
    assert registry.get_sample_value("harp_predict_failures_total") == 1.0
    assert "decision not encodable; answering with no action" in caplog.text
