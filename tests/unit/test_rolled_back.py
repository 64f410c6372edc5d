"""A version an admin rolled back from is marked as such in its promotion.json (model.verdict) and
counts as refused: no fallback, the daemon's at a start or `harp rollback` without a version, serves
it again; naming it to `harp rollback` serves it and clears the mark."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.core.request import Target
from slurm_harp.model import store as store_module
from slurm_harp.model import verdict as verdict_module
from slurm_harp.model.card import PROMOTION_FILE
from slurm_harp.model.retention import prune
from slurm_harp.model.store import CURRENT_FILE, ModelStore
from slurm_harp.server.reloader import reload_models
from slurm_harp.state_dir import replace_file
from tests.unit.test_models_cli import publish


def test_a_version_rolled_back_from_is_served_by_no_fallback_until_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """`harp rollback` recorded nothing: rolled back from a bad version, then the next night's
    version promoted and later garbled on disk, the daemon's start served the bad version again,
    and so did a rollback without a version."""
    store = ModelStore(tmp_path)
    _, good, bad = publish(store, 3)
    assert main(["rollback", "--store", str(tmp_path), good]) == 0
    said = capsys.readouterr().out
    (newer,) = publish(store, 1)  # the next night's, promoted
    onnx = store.target_dir(Target.TIME) / newer / "q0.90.onnx"
    onnx.write_bytes(onnx.read_bytes()[:100])

    assert reload_models(tmp_path, {}, None).models[Target.TIME].version == good
    assert f"older model {bad} for time was rolled back from (" in caplog.text
    assert main(["rollback", "--store", str(tmp_path)]) == 0
    assert store.current_version(Target.TIME) == good
    assert f"now serving {good} (was {bad}); marked as rolled back from, served by no fallback" in said
    assert f"served by no fallback unless named: {bad}; the daemon" in said
    assert main(["models", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"  {bad}  trained on 2 jobs, rolled back from (" in out
    assert f"  {newer}  trained on 0 jobs, rolled back from (" in out
    assert f"* {good}  trained on 1 jobs\n" in out

    # Named, it serves, and its mark goes: the promotion.json made only for it with it.
    assert main(["rollback", "--store", str(tmp_path), bad]) == 0
    assert f"; the mark of {bad} as rolled back from is removed;" in capsys.readouterr().out
    assert store.current_version(Target.TIME) == bad and store.verdict(Target.TIME, bad) is None
    assert not store.refused(Target.TIME, good)  # left for a newer version: no step back, no mark


def test_a_rollback_past_several_versions_withdraws_each_it_passes_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the version serving was marked: rolled back from V4 past a bad V2 to V1, then the next
    night's version garbled on disk, the daemon's start served V2, so did a rollback without a
    version, and retention kept V2 and deleted V1, the one the admin chose."""
    root = tmp_path / "store"
    store = ModelStore(root)
    chosen, skipped, refused, serving = publish(store, 4)
    store.write_verdict(Target.TIME, refused, {"promote": False, "verdict": "refused: kills more"})
    assert main(["rollback", "--store", str(root), chosen]) == 0
    said = capsys.readouterr().out
    assert f"served by no fallback unless named: {skipped}, {serving}; refused already: {refused};" in said
    (newer,) = publish(store, 1)  # the next night's, promoted
    onnx = store.target_dir(Target.TIME) / newer / "q0.90.onnx"
    onnx.write_bytes(onnx.read_bytes()[:100])

    assert reload_models(root, {}, None).models[Target.TIME].version == chosen
    shutil.copytree(root, tmp_path / "copy")
    removed = prune(ModelStore(tmp_path / "copy"), Target.TIME, 1)
    assert removed == [skipped, refused, serving]  # the fallback, the admin's choice, is kept
    assert main(["rollback", "--store", str(root)]) == 0
    assert store.current_version(Target.TIME) == chosen
    said = capsys.readouterr().out  # what it passed over, each named
    assert f"unless named: {newer}; refused already: {skipped}, {refused}, {serving}; the daemon" in said

    # Named, a version passed over serves again and loses its mark; going forward marks nothing.
    assert main(["rollback", "--store", str(root), skipped]) == 0
    assert not store.refused(Target.TIME, skipped) and not store.refused(Target.TIME, chosen)
    assert store.refused(Target.TIME, serving)


def test_a_current_that_cannot_be_replaced_leaves_no_mark_and_exits_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The marks were written, then CURRENT could not be replaced (disk full, read-only): a
    traceback, and the version that kept serving stayed marked, skipped by every fallback."""
    store = ModelStore(tmp_path)
    chosen, skipped, serving = publish(store, 3)
    verdict = {"promote": True, "verdict": "promoted: cuts more"}
    store.write_verdict(Target.TIME, serving, verdict)

    def full(path: Path, data: bytes, *args: int) -> None:
        if path.name == CURRENT_FILE:
            raise OSError(errno.ENOSPC, "No space left on device")
        replace_file(path, data, *args)

    monkeypatch.setattr(store_module, "replace_file", full)
    assert main(["rollback", "--store", str(tmp_path), chosen]) == 1
    said = "time: not rolled back: CURRENT cannot be replaced ([Errno 28] No space left on device); "
    assert said + f"{serving} still serves" in caplog.text
    assert capsys.readouterr().out == ""
    assert store.current_version(Target.TIME) == serving
    assert store.verdict(Target.TIME, serving) == verdict and store.verdict(Target.TIME, skipped) is None


def test_the_mark_keeps_the_verdict_and_an_unreadable_one_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ModelStore(tmp_path)
    older, judged, unreadable = publish(store, 3)
    verdict = {"promote": True, "verdict": "promoted: cuts more"}
    store.write_verdict(Target.TIME, judged, verdict)
    store.set_current(Target.TIME, judged)
    assert main(["rollback", "--store", str(tmp_path), older]) == 0
    note = store.verdict(Target.TIME, judged)
    assert note is not None and note.items() >= verdict.items() and store.refused(Target.TIME, judged)
    assert main(["models", "--store", str(tmp_path)]) == 0
    said = f"  {judged}  trained on 1 jobs, promoted: cuts more, rolled back from ("
    assert said in capsys.readouterr().out
    assert main(["rollback", "--store", str(tmp_path), judged]) == 0
    assert store.verdict(Target.TIME, judged) == verdict and not store.refused(Target.TIME, judged)

    path = store.target_dir(Target.TIME) / unreadable / PROMOTION_FILE
    path.write_bytes(b'{"promote": tr')
    store.set_current(Target.TIME, unreadable)
    assert main(["rollback", "--store", str(tmp_path), judged]) == 0
    assert f"(was {unreadable}); refused already: {unreadable}; the daemon" in capsys.readouterr().out
    assert path.read_bytes() == b'{"promote": tr'  # what it hides is not written over


def test_a_mark_that_cannot_be_written_still_rolls_back_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(tmp_path)
    older, serving = publish(store, 2)

    def full(version_dir: Path, verdict: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(verdict_module, "write", full)
    assert main(["rollback", "--store", str(tmp_path)]) == 1
    assert store.current_version(Target.TIME) == older
    said = f"time: cannot mark {serving} as rolled back from ([Errno 28] No space left on device): a fallback"
    assert said in caplog.text


def test_a_promotion_json_holding_only_the_mark_reads_as_refused(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    (version,) = publish(store, 1)
    path = store.target_dir(Target.TIME) / version / PROMOTION_FILE
    path.write_text(json.dumps({"rolled_back": "2026-01-05T03:00:00Z"}))
    assert store.refusal(Target.TIME, version) == "was rolled back from (2026-01-05T03:00:00Z)"
    path.write_text(json.dumps({"rolled_back": 7}))  # no verdict and no mark: unreadable, refused
    assert (store.refusal(Target.TIME, version) or "").startswith("has an unreadable verdict")


def test_prune_keeps_the_fallback_that_loads_not_a_garbled_one_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A card garbled in the version before CURRENT: prune kept that one as the fallback and removed
    the one before it, the only one a CURRENT that does not load at a start could fall back to."""
    store = ModelStore(tmp_path)
    good, garbled, current = publish(store, 3)
    (store.target_dir(Target.TIME) / garbled / "card.json").write_text("{")
    assert prune(store, Target.TIME, 1) == [garbled]
    assert f"time: version {garbled} does not load, no fallback: " in caplog.text
    onnx = store.target_dir(Target.TIME) / current / "q0.90.onnx"
    onnx.write_bytes(onnx.read_bytes()[:100])
    assert reload_models(tmp_path, {}, None).models[Target.TIME].version == good
