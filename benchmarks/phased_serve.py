"""`harp serve` with its Predict call timed phase by phase, for bench_plugin_phases.

    HARP_BENCH_PHASES=FILE python -m benchmarks.phased_serve serve --config harp.toml

Wraps the functions a Predict call runs through (the handler, the decision, the features, the
calibrated rule) and the counting after the answer is sent with a monotonic clock, then runs the
`harp` command line as is. At exit, FILE gets one line per call: the job's time limit in minutes
and each phase in µs. The wrappers cost about a microsecond per call; the phases are for comparing
parts of one call, not for the daemon's whole cost (bench_plugin measures that without them).
Test: tests/unit/test_phased_serve.py.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurm_harp import cli  # first: it sets grpcio's core settings before grpc is imported
from slurm_harp.core import predictor
from slurm_harp.server import service

ENV = "HARP_BENCH_PHASES"
clock = time.perf_counter_ns
calls: list[dict[str, Any]] = []
current: dict[str, Any] = {}


def timed(owner: Any, name: str, phase: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its time to the current call's ``phase``."""
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            current[phase] = current.get(phase, 0) + clock() - t0
            current.setdefault(phase + "@", t0)

    setattr(owner, name, wrapper)


def handler(inner: Callable[..., bytes]) -> Callable[..., bytes]:
    def answer(self: service.PredictorService, data: bytes) -> bytes:
        current.clear()
        t0 = clock()
        reply = inner(self, data)
        current["handler"] = clock() - t0
        current["handler@"] = t0
        calls.append(dict(current))
        return reply

    return answer


def afterwards(inner: Callable[..., None]) -> Callable[..., None]:
    """The counting after an answer is sent: added to the call just answered."""

    def count(self: service.PredictorService) -> None:
        t0 = clock()
        inner(self)
        if calls:
            calls[-1]["after"] = calls[-1].get("after", 0) + clock() - t0

    return count


def record_limit(inner: Callable[..., Any]) -> Callable[..., Any]:
    def decide(self: predictor.Predictor, request: Any) -> Any:
        current["limit"] = request.time_limit_minutes
        return inner(self, request)

    return decide


def phases(call: dict[str, Any]) -> dict[str, float]:
    """One call's phases in µs; what no wrapper covers is named by where it lies."""
    us = {k: v / 1e3 for k, v in call.items() if not k.endswith("@") and k != "limit"}
    us["parse"] = (call["decide@"] - call["handler@"]) / 1e3
    us["policy and messages"] = us["decide"] - us.get("features", 0) - us.get("rule", 0)
    us["reply"] = us["handler"] - us["parse"] - us["decide"]
    return us


def dump(path: Path) -> None:
    path.write_text("".join(json.dumps({"limit": c.get("limit"), **phases(c)}) + "\n" for c in calls))


def install() -> None:
    service.PredictorService.answer = handler(service.PredictorService.answer)  # type: ignore[method-assign]
    service.PredictorService.count = afterwards(service.PredictorService.count)  # type: ignore[method-assign]
    timed(predictor.Predictor, "decide", "decide")
    predictor.Predictor.decide = record_limit(predictor.Predictor.decide)  # type: ignore[method-assign]
    timed(predictor.Predictor, "_features", "features")
    timed(predictor, "_calibrated", "rule")


if __name__ == "__main__":
    install()
    atexit.register(dump, Path(os.environ[ENV]))
    sys.exit(cli.main(sys.argv[1:]))
