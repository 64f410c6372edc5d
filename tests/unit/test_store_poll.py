"""The daemon's store poll: a promoted version is loaded without a signal, and one rejected while
its files were still being copied in is loaded once they are complete."""

from __future__ import annotations

import logging
import resource
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.config import parse
from slurm_harp.core.request import Target
from slurm_harp.model.store import ModelStore
from slurm_harp.server.daemon import Daemon


def test_a_version_rejected_half_copied_is_loaded_at_a_poll_once_complete(
    trained_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the poll recorded CURRENT's name even though the version was rejected: once its file
    was complete, no poll loaded it (only a SIGHUP or a restart did)."""
    root = Path(shutil.copytree(trained_store, tmp_path / "store"))
    daemon = Daemon(parse({"store": {"path": str(root)}}), CollectorRegistry())
    daemon.reload_models()
    serving = daemon.predictor.models[Target.TIME].version
    store = ModelStore(root)
    newer = root / "time" / "20991231T235959.000000Z"  # a copy of it, promoted as it is copied in
    shutil.copytree(root / "time" / serving, newer)
    (newer / "card.json").write_text((newer / "card.json").read_text().replace(serving, newer.name))
    onnx = next(newer.glob("*.onnx"))
    whole = onnx.read_bytes()
    onnx.write_bytes(whole[: len(whole) // 2])
    store.set_current(Target.TIME, newer.name)
    caplog.set_level(logging.INFO)
    for _ in range(3):
        daemon.poll_store()
    assert daemon.predictor.models[Target.TIME].version == serving  # the last good one meanwhile
    rejections = [r for r in caplog.records if r.getMessage().startswith(f"rejected model {newer}")]
    assert len(rejections) == 1  # once for this state of its files, not at every poll
    onnx.write_bytes(whole)  # the copy completes
    daemon.poll_store()
    assert daemon.predictor.models[Target.TIME].version == newer.name


def test_a_current_larger_than_harp_writes_is_rejected_once_and_the_model_keeps_serving(
    trained_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A CURRENT of 1 GiB (a bad restore) was read whole at every poll: seconds holding the GIL, past
    the plugin's deadline (its breaker switched harp off), and 2 GiB more every 30 s."""
    root = Path(shutil.copytree(trained_store, tmp_path / "store"))
    daemon = Daemon(parse({"store": {"path": str(root)}}), CollectorRegistry())
    daemon.reload_models()
    serving = daemon.predictor.models[Target.TIME].version
    pointer = root / "time" / "CURRENT"
    with pointer.open("r+b") as handle:
        handle.truncate(1 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(3):
        daemon.poll_store()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 * 1024  # KiB
    assert daemon.predictor.models[Target.TIME].version == serving
    said = (
        f"rejected CURRENT for time (unreadable: {pointer}: larger than 256 bytes: not a CURRENT harp writes)"
    )
    assert [r.getMessage() for r in caplog.records].count(f"{said}; serving {serving}") == 1
