"""The gRPC adapter: a thin servicer around the transport-neutral Predictor."""

from __future__ import annotations

import logging
import time

import grpc

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.core.predictor import Predictor
from slurm_harp.server.convert import decision_to_proto, request_from_proto
from slurm_harp.server.serving_metrics import ServingMetrics

log = logging.getLogger(__name__)


class PredictorService(pb_grpc.PredictorServicer):  # type: ignore[misc]
    def __init__(self, predictor: Predictor, metrics: ServingMetrics) -> None:
        self._predictor = predictor
        self._metrics = metrics

    def Predict(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Decision:
        started = time.perf_counter()
        try:
            decision = self._predictor.decide(request_from_proto(request))
        except Exception:
            # The plugin fails open anyway; an empty decision says "do nothing" explicitly and cheaply.
            log.exception("Predict failed; answering with no action")
            self._metrics.failures.inc()
            return pb.Decision(mode="off")
        self._metrics.observe(decision)
        reply = decision_to_proto(decision)
        self._metrics.latency.observe(time.perf_counter() - started)
        return reply
