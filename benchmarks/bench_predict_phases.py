"""Benchmark: where the daemon's own time per Predict call goes, back to back and after idle.

    .venv/bin/python -m benchmarks.bench_predict_phases [--calls 2000]

The first step of issue 23 ("find where the time goes before changing anything"). Prints, each
measured in this run on the same machine, p50 in µs back to back and after 7 ms of sleep:
- the machine's own wake-up cost: a fixed pure-Python loop and a strided read of 1.6 MB;
- the daemon's phases on one request (real model trained on the bundled trace, calibrated rule):
  parse + convert the request, features, the ONNX sessions of the ladder, the rule and the policy,
  the reply, the serving metrics, and the whole handler, also for jobs of other sizes (the number
  of models the calibrated rule reads follows the job's size);
- the ONNX part alone: one session (with session.run, and on buffers bound once as the daemon runs
  it: model/row_run.py), every session of the ladder one after another, and one graph holding the
  whole ladder (needs the `onnx` package, from the train extra).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest.mock import Mock

import grpc
import numpy as np
import onnxruntime as ort

from benchmarks.bench_daemon import REQUEST
from benchmarks.common import serving, train_bundled
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.memory_default import MemoryDefault, MemoryDefaults, PartitionMemory
from slurm_harp.core.predictor import _calibrated
from slurm_harp.core.request import Target
from slurm_harp.core.safety_rule import Calibration, decision_weight, viable_models
from slurm_harp.model.row_run import RowRun
from slurm_harp.server.convert import decision_to_proto, request_from_proto

IDLE_S = 0.007


# What harp serve reads from a slurmctld whose slurm.conf sets DefMemPerCPU=512 (the test cluster's).
_PER_CPU = MemoryDefault(per_cpu_mb=512)
SITE_MEMORY = MemoryDefaults(_PER_CPU, {"batch": PartitionMemory(_PER_CPU, 22900)}, "batch")


def p50_us(step: Callable[[], object], calls: int, gap_s: float) -> float:
    times = []
    for _ in range(calls):
        if gap_s:
            time.sleep(gap_s)
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times[calls // 10 :]) * 1e6


def _loop() -> int:
    total = 0
    for i in range(3000):
        total += i
    return total


def _merged_session(paths: list[Path]) -> tuple[ort.InferenceSession, list[str]] | None:
    try:
        import onnx
        from onnx import compose, helper
    except ImportError:
        return None
    nodes, initializers, outputs = [], [], []
    first = onnx.load(str(paths[0]))
    for i, path in enumerate(paths):
        graph = compose.add_prefix(onnx.load(str(path)), prefix=f"m{i}_").graph
        own_input = graph.input[0].name
        for node in graph.node:
            node.input[:] = [first.graph.input[0].name if v == own_input else v for v in node.input]
            nodes.append(node)
        initializers += list(graph.initializer)
        outputs += list(graph.output)
    merged = helper.make_model(
        helper.make_graph(nodes, "ladder", [first.graph.input[0]], outputs, initializers),
        opset_imports=first.opset_import,
    )
    merged.ir_version = first.ir_version
    session = ort.InferenceSession(merged.SerializeToString(), sess_options=_options())
    return session, [o.name for o in session.get_outputs()]


def _options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return options


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    calls = args.calls
    idle_calls = max(200, calls // 5)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        train_bundled(store)
        daemon, service = serving(store)
        predictor = daemon.predictor
        model = predictor.models[Target.TIME]
        calibration = model.calibration  # type: ignore[attr-defined]
        body = REQUEST.SerializeToString()
        request = request_from_proto(pb.SubmitRequest.FromString(body))
        features, _cold = predictor._features(request)
        decision = predictor.decide(request)
        context = Mock(spec=grpc.ServicerContext)
        version_dir = next(p for p in (store / "time").iterdir() if p.is_dir())
        paths = sorted(version_dir.glob("*.onnx"))[: len(model.names)]  # type: ignore[attr-defined]
        sessions = [ort.InferenceSession(str(p), sess_options=_options()) for p in paths]
        names = [s.get_outputs()[0].name for s in sessions]
        x = np.asarray(features, dtype=np.float32)

        bound = RowRun.of(sessions[0], "features", [names[0]], x.shape[1])
        assert bound is not None

        def every_session() -> None:
            for session, name in zip(sessions, names, strict=True):
                session.run([name], {"features": x})

        phases: list[tuple[str, Callable[[], object]]] = [
            ("machine: 3000-step Python loop", _loop),
            ("machine: strided read of 1.6 MB", lambda: _MEMORY[::64].sum()),
            ("parse + convert the request", lambda: request_from_proto(pb.SubmitRequest.FromString(body))),
            (
                "parse + convert, a site's memory defaults",
                lambda: request_from_proto(pb.SubmitRequest.FromString(body), SITE_MEMORY),
            ),
            ("features (request + history)", lambda: predictor._features(request)),
            (
                "ladder + calibrated rule",
                lambda: _calibrated(model, calibration, features, request),  # type: ignore[arg-type]
            ),
            ("whole decide (all targets + policy)", lambda: predictor.decide(request)),
            ("reply to proto + serialise", lambda: decision_to_proto(decision).SerializeToString()),
            ("whole handler (service.predict)", lambda: service.predict(body, context)),
            *(
                (f"  {label} ({reads} models read)", lambda b=other: service.predict(b, context))
                for label, reads, other in _sized_requests(calibration)
            ),
            ("ONNX: one session", lambda: sessions[0].run([names[0]], {"features": x})),
            ("ONNX: one session, bound buffers", functools.partial(bound, x)),
            (f"ONNX: {len(sessions)} sessions one by one", every_session),
        ]
        merged = _merged_session(paths)
        if merged is not None:
            session, outputs = merged
            phases.append(
                (f"ONNX: one graph of {len(sessions)}", lambda: session.run(outputs, {"features": x}))
            )
        print(f"p50 µs per call ({calls} back to back, {idle_calls} after {IDLE_S * 1e3:.0f} ms idle)")
        print(f"{'phase':<40} {'back to back':>12} {'after idle':>11} {'ratio':>6}")
        for name, step in phases:
            hot, cold = p50_us(step, calls, 0.0), p50_us(step, idle_calls, IDLE_S)
            print(f"{name:<40} {hot:>12.1f} {cold:>11.1f} {cold / hot:>6.1f}")


_MEMORY = np.random.default_rng(0).random(200_000)
# Jobs of other sizes: how many models the calibrated rule reads follows the size.
SIZES = ((1, 60), (4, 600), (1, 3 * 1440), (64, 3 * 1440))


def _sized_requests(calibration: Calibration) -> list[tuple[str, int, bytes]]:
    """(label, models the rule reads, request bytes) for REQUEST resized to each of SIZES."""
    out = []
    for cpus, minutes in SIZES:
        msg = pb.SubmitRequest()
        msg.CopyFrom(REQUEST)
        msg.min_cpus, msg.time_limit_minutes = cpus, minutes
        request = request_from_proto(msg)
        weight = decision_weight(Target.TIME, request)
        reads = len(viable_models(float(minutes), weight, calibration, request.partition))
        out.append((f"{cpus} CPU x {minutes / 60:g} h", reads, msg.SerializeToString()))
    return out


if __name__ == "__main__":
    main()
