"""The gRPC adapter: a thin handler around the transport-neutral Predictor.

Predict is registered with identity (de)serializers, so the request bytes are parsed here and not
by grpcio: a request that does not parse (invalid UTF-8 in a string field, truncated or garbage
bytes) is answered with a no-op Decision (reason bad_request) instead of an RPC error, which would
trip the plugin's circuit breaker for every user's jobs; and grpcio's own deserialisation-failure
path, which leaks memory on every failed call (grpc/grpc#36908), is never taken. So is a partition
list too long for its per-partition rules to be applied (convert.PartitionListTooLong).
"""

from __future__ import annotations

import logging
import time
from collections import deque

import grpc
from google.protobuf.message import DecodeError

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, Reason, TargetDecision
from slurm_harp.core.predictor import TARGETS, Predictor
from slurm_harp.server.convert import decision_to_proto, submit_request
from slurm_harp.server.serving_metrics import ServingMetrics

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["Predictor"].full_name
PREDICT = f"/{SERVICE}/Predict"  # the method's path, as grpc core routes it


def bad_request(detail: str) -> Decision:
    """Leave the job alone: the request could not be read."""
    return Decision(
        targets=tuple(TargetDecision(t, Action.NONE, Reason.BAD_REQUEST, detail=detail) for t in TARGETS),
        mode="off",
    )


class PredictorService:
    def __init__(self, predictor: Predictor, metrics: ServingMetrics) -> None:
        self._predictor = predictor
        self._metrics = metrics
        # Decisions answered and not counted yet: (decision, started, answered), perf_counter s.
        self._answered: deque[tuple[Decision, float, float]] = deque()

    def handler(self) -> grpc.GenericRpcHandler:  # type: ignore[type-arg]
        """The harp.v1.Predictor service, its request bytes parsed in ``predict``."""
        method = grpc.unary_unary_rpc_method_handler(self.predict)  # identity (de)serializers
        return grpc.method_handlers_generic_handler(SERVICE, {"Predict": method})

    def predict(self, data: bytes, _context: grpc.ServicerContext | None = None) -> bytes:
        """Request bytes in, Decision bytes out, counted before they are returned (the worker
        pool's path; the lane answers first and counts after: ``answer``, then ``count``)."""
        reply = self.answer(data)
        self.count()
        return reply

    def answer(self, data: bytes) -> bytes:
        """Request bytes in, Decision bytes out; the decision is counted by the next ``count``."""
        started = time.perf_counter()
        try:
            request = submit_request(pb.SubmitRequest.FromString(data), self._predictor.memory_defaults)
        except (DecodeError, ValueError, TypeError) as exc:
            # One user's odd job: answered, counted, logged (length only: the bytes are the user's).
            self._metrics.bad_requests.inc()
            log.warning("bad request (%d bytes) answered with no action: %.200s", len(data), exc)
            decision = bad_request(type(exc).__name__)
        else:
            try:
                decision = self._predictor.decide(request)
            except Exception:
                return self._no_action("Predict failed")
        try:
            reply = bytes(decision_to_proto(decision).SerializeToString())
        except Exception:  # a value no field holds (a memory ask past 2^64 MB, say)
            return self._no_action("decision not encodable")
        self._answered.append((decision, started, time.perf_counter()))
        return reply

    def _no_action(self, what: str) -> bytes:
        # The plugin fails open anyway; an explicit "do nothing" is cheap and clear.
        log.exception("%s; answering with no action", what)
        self._metrics.failures.inc()
        return bytes(pb.Decision(mode="off").SerializeToString())

    def count(self) -> None:
        """Count the decisions answered so far in the serving metrics. slurmctld waits for the
        answer, not for this: the lane calls it once the answer is sent."""
        while self._answered:
            try:
                decision, started, answered = self._answered.popleft()
            except IndexError:  # another thread counted it meanwhile
                return
            self._metrics.latency.observe(answered - started)
            self._metrics.observe(decision)  # last: counted decisions imply their latencies are
