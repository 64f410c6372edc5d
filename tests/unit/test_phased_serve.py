"""benchmarks.phased_serve still times every phase of a Predict call: its wrappers name functions of
the daemon (the handler, the decision, the features, the calibrated rule, the counting), and a rename
there would otherwise only show when the benchmark is next run on a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import phased_serve
from benchmarks.bench_plugin_phases import DAEMON_PHASES
from benchmarks.common import serving
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core import predictor
from slurm_harp.server import service


def test_every_phase_of_a_call_is_timed(trained_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Undone after the test: install() replaces these for the benchmark's process.
    for owner, name in (
        (service.PredictorService, "answer"),
        (service.PredictorService, "count"),
        (predictor.Predictor, "decide"),
        (predictor.Predictor, "_features"),
        (predictor, "_calibrated"),
    ):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(phased_serve, "calls", [])
    phased_serve.install()
    _, handler = serving(trained_store)
    request = pb.SubmitRequest(user_name="u1", time_limit_minutes=3 * 24 * 60, min_cpus=4)
    reply = handler.predict(request.SerializeToString())  # the pool's path: answer, then count
    assert pb.Decision.FromString(reply).mode == "rewrite"
    [call] = phased_serve.calls
    assert call["limit"] == 3 * 24 * 60
    phases = phased_serve.phases(call)
    for phase in DAEMON_PHASES:  # every column the benchmark prints
        assert phases[phase] > 0, (phase, phases)
    inside = phases["parse"] + phases["decide"] + phases["reply"]
    assert inside == pytest.approx(phases["handler"]), "the handler's phases add up to it"
