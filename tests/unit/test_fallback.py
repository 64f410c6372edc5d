"""model.fallback: the one rule the daemon's start, `harp rollback` and retention share for the
version that serves in place of one that cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.core.request import Target
from slurm_harp.model.fallback import PassedOver, newest_loadable
from slurm_harp.model.store import ModelStore
from tests.unit.test_models_cli import publish


def test_the_newest_older_version_not_refused_that_loads(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    good, broken, refused, current = publish(store, 4)
    onnx = store.target_dir(Target.TIME) / broken / "q0.90.onnx"
    onnx.write_bytes(onnx.read_bytes()[:100])
    store.write_verdict(Target.TIME, refused, {"promote": False, "verdict": "over the kill budget"})
    passed: list[PassedOver] = []

    model = newest_loadable(store, Target.TIME, current, passed.append)

    assert model is not None and model.version == good
    assert [(p.version, p.refusal) for p in passed] == [(refused, "was refused at promotion"), (broken, None)]
    assert passed[1].error is not None and "q0.90.onnx" in str(passed[1].error)
    # No bound: the newest of all; bounded by the oldest: none.
    unbounded = newest_loadable(store, Target.TIME, None)
    assert unbounded is not None and unbounded.version == current
    assert newest_loadable(store, Target.TIME, good) is None


def test_a_store_that_cannot_be_listed_is_the_callers_to_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore(tmp_path)
    publish(store, 1)

    def unlistable(self: ModelStore, target: Target) -> list[str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ModelStore, "versions", unlistable)
    with pytest.raises(OSError, match="Permission denied"):
        newest_loadable(store, Target.TIME, None)
