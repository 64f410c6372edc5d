"""A small gRPC client for tests, speaking to a daemon over its Unix socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc


class Client:
    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix:{socket}")
        self.stub = pb_grpc.PredictorStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def predict(self, timeout: float = 5.0, **fields: Any) -> pb.Decision:
        reply: pb.Decision = self.stub.Predict(pb.SubmitRequest(**fields), timeout=timeout)
        return reply

    def status(self, service: str = "") -> str:
        reply = self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def target(decision: pb.Decision, name: str) -> pb.TargetDecision:
    wanted = pb.Target.Value("TARGET_" + name.upper())
    return next(t for t in decision.targets if t.target == wanted)
