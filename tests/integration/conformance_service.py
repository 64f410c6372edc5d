"""The conf.Test service that the conformance modules of the plugin's Lua gRPC client
(test_lua_grpc_*.py) call on a real grpcio server, and `call`, which calls it through the Lua driver.

Echo, Big (n bytes of a pattern), Sleep (recording the deadline and metadata it got), Abort (a
trailers-only error), SetCode (an error in trailers), Empty, and the streaming ErrorAfterMessage and
TwoMessages; with ``lane``, the unary Echo, Big, Sleep and Empty are answered in core lanes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from slurm_harp.server.unary_lane import UnaryLane
from tests.integration.lua_driver import ROOMY_MS, Driver

SERVICE = "conf.Test"
PATTERN = bytes(range(256))


def pattern(n: int) -> bytes:
    return (PATTERN * (n // 256 + 1))[:n]


class Recorder:
    def __init__(self) -> None:
        self.time_remaining: list[float] = []
        self.metadata: list[dict[str, str]] = []


def conformance_handlers(rec: Recorder) -> dict[str, Any]:
    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        return request

    def big(request: bytes, context: grpc.ServicerContext) -> bytes:
        return pattern(int(request))

    def sleep(request: bytes, context: grpc.ServicerContext) -> bytes:
        rec.time_remaining.append(context.time_remaining())
        rec.metadata.append({k: str(v) for k, v in context.invocation_metadata()})
        time.sleep(float(request or b"0"))
        return b"slept"

    def abort(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no model loaded: naïve 100% sure")

    def set_code(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.set_code(grpc.StatusCode.INTERNAL)
        context.set_details("failed after the work")
        return b"never sent"

    def error_after_message(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"first"
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "after one message")

    def two_messages(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"one"
        yield b"two"

    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    return {
        "Echo": unary(echo),
        "Big": unary(big),
        "Sleep": unary(sleep),
        "Abort": unary(abort),
        "SetCode": unary(set_code),
        "Empty": unary(lambda request, context: b""),
        "ErrorAfterMessage": stream(error_after_message),
        "TwoMessages": stream(two_messages),
    }


def lane_sleep(request: bytes) -> bytes:
    time.sleep(float(request or b"0"))
    return b"slept"


# Unary methods that the server can also answer in a core lane (slurm_harp.server.unary_lane).
LANE_METHODS = {
    "Echo": lambda request: request,
    "Big": lambda request: pattern(int(request)),
    "Sleep": lane_sleep,
    "Empty": lambda request: b"",
}


def start_conformance_server(sock: Path, rec: Recorder, lane: bool = False) -> grpc.Server:
    """grpcio's server; with ``lane``, Echo, Big, Sleep and Empty are answered in core lanes
    (as the daemon answers Predict) and the other methods by the worker pool beside them."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    lanes = []
    if lane:
        for name, handler in LANE_METHODS.items():
            attached = UnaryLane.attach(server, f"/{SERVICE}/{name}", handler)
            assert attached is not None, "the pinned grpcio offers the core lane"
            lanes.append(attached)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, conformance_handlers(rec)),)
    )
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    for attached in lanes:
        attached.start()
    return server


def call(
    drv: Driver, method: str, payload: str = "", deadline_ms: float = ROOMY_MS, **kw: Any
) -> dict[str, Any]:
    path = method if method.startswith("/") else f"/{SERVICE}/{method}"
    out = drv("raw", method=path, payload=payload, deadline_ms=deadline_ms, **kw)
    assert "raised" not in str(out.get("err")), out  # a Lua error must never escape
    return out


def expect_pattern(out: dict[str, Any], n: int) -> None:
    assert out["ok"], out
    assert out["size"] == n and out["sum"] == sum(pattern(n)), out
    assert bytes.fromhex(out["head"]) == pattern(min(n, 64))
