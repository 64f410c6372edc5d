"""A challenger whose verdict is never written is never served: it is published marked as not
judged (model.verdict.PENDING_VERDICT) and the daemon's fallback, `harp rollback` and retention read
that mark as refused. Failures are injected at the store's file boundary."""

from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

import pytest

from slurm_harp.commands import models as models_command
from slurm_harp.core.request import Target
from slurm_harp.model import verdict as verdict_module
from slurm_harp.model.card import PROMOTION_FILE
from slurm_harp.model.retention import prune
from slurm_harp.model.store import ModelStore
from slurm_harp.model.verdict import PENDING_VERDICT
from slurm_harp.server.reloader import reload_models
from slurm_harp.state_dir import replace_file
from tests.unit.test_promotion import FAST, _train, db  # noqa: F401  (db: the fixture, shared)
from tests.unit.test_store import CARD, FILES


def test_a_version_awaiting_its_verdict_is_refused_until_it_has_one(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    plain = store.publish(Target.TIME, FILES, CARD, make_current=False)
    awaiting = store.publish(Target.TIME, FILES, CARD, make_current=False, awaiting_verdict=True)
    assert store.verdict(Target.TIME, plain) is None and not store.refused(Target.TIME, plain)
    assert store.verdict(Target.TIME, awaiting) == PENDING_VERDICT and store.refused(Target.TIME, awaiting)
    store.write_verdict(Target.TIME, awaiting, {"promote": True, "verdict": "promoted"})
    assert not store.refused(Target.TIME, awaiting)
    # Retention counts one never judged with the refused: it does not push a champion out.
    never = store.publish(Target.TIME, FILES, CARD, make_current=False, awaiting_verdict=True)
    assert prune(store, Target.TIME, 1) == [plain] and store.versions(Target.TIME) == [awaiting, never]


def _run(store_dir: Path, db_path: Path, *extra: str) -> int:
    return _train("--db", str(db_path), "--store", str(store_dir), *FAST, *extra)


def test_a_challenger_whose_verdict_and_removal_both_fail_is_never_served(
    db: Path,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The disk fills as the verdict is written, and the challenger cannot be renamed away either:
    it stays. Later a newer version is served, and breaks; at the daemon's start the fallback must
    skip the challenger, never judged, for the champion before it, and so must `harp rollback`."""
    store_dir = tmp_path / "models"
    store = ModelStore(store_dir)
    assert _run(store_dir, db) == 0
    champion = store.current_version(Target.TIME)
    assert champion is not None

    rename = Path.rename

    def no_verdict(path: Path, data: bytes, mode: int = 0o640) -> None:
        if path.name == PROMOTION_FILE:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        replace_file(path, data, mode)

    def no_trash(self: Path, target: str | os.PathLike[str]) -> Path:
        if Path(target).name.startswith(".trash-"):
            raise OSError(errno.EIO, "Input/output error", str(self))
        return rename(self, target)

    with monkeypatch.context() as failing:
        failing.setattr(verdict_module, "replace_file", no_verdict)
        failing.setattr(Path, "rename", no_trash)
        assert _run(store_dir, db, "--floor", "150") == 1
    assert "cannot write the verdict on" in caplog.text
    assert "cannot remove" in caplog.text and "marked not judged" in caplog.text
    unjudged = store.versions(Target.TIME)[-1]
    assert unjudged != champion and store.current_version(Target.TIME) == champion
    assert store.verdict(Target.TIME, unjudged) == PENDING_VERDICT

    # A newer version is served (--promote always: no verdict of its own), then breaks.
    assert _run(store_dir, db, "--promote", "always") == 0
    newest = store.current_version(Target.TIME)
    assert newest is not None and store.versions(Target.TIME) == [champion, unjudged, newest]
    for model in (store.target_dir(Target.TIME) / newest).glob("*.onnx"):
        model.write_bytes(b"damaged")
    served = reload_models(store_dir, {}, None).models[Target.TIME]
    assert served.version == champion
    assert f"older model {unjudged} for time awaits a verdict never written: not served" in caplog.text

    parser = argparse.ArgumentParser()
    models_command.register(parser.add_subparsers())
    args = parser.parse_args(["rollback", "--store", str(store_dir)])
    assert args.func(args) == 0
    assert store.current_version(Target.TIME) == champion
    args = parser.parse_args(["models", "--store", str(store_dir), "--target", "time"])
    assert args.func(args) == 0
    assert f"{unjudged}  " in (out := capsys.readouterr().out) and "not judged" in out
