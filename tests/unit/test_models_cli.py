from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.core.request import Target
from slurm_harp.model import retention
from slurm_harp.model.card import CARD_FILE, PROMOTION_FILE
from slurm_harp.model.retention import prune
from slurm_harp.model.store import ModelStore
from tests.conftest import REPO

REFERENCE = next((REPO / "models" / "reference" / "time").glob("*/card.json")).parent


def publish(store: ModelStore, n: int) -> list[str]:
    """``n`` versions of the reference model (they load, as `harp rollback` checks), the i-th
    trained on i jobs by its card."""
    card = json.loads((REFERENCE / CARD_FILE).read_text())
    files = {name: (REFERENCE / name).read_bytes() for name in card["files"]}
    kept = {
        k: v for k, v in card.items() if k not in ("version", "created", "files", "target", "calibration")
    }
    return [store.publish(Target.TIME, files, kept | {"training": {"rows_train": i}}) for i in range(n)]


def test_models_lists_versions_and_marks_the_serving_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ModelStore(tmp_path)
    versions = publish(store, 2)
    assert main(["models", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"* {versions[1]}  trained on 1 jobs" in out and f"  {versions[0]}  trained on 0 jobs" in out
    assert "memory: no model" in out


def test_models_show_the_rules_validation_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ModelStore(tmp_path)
    figures = {"waste_cut_pct": 13.3, "newly_killed_pct": 0.44}
    older = store.publish(Target.TIME, {"q0.90.onnx": b"x"}, {"calibration": {"validation": figures}})
    newer = store.publish(
        Target.TIME, {"q0.90.onnx": b"x"}, {"calibration": {"validation": figures | {"net_cut_pct": -8.4}}}
    )
    assert main(["models", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    said = "validation: cuts 13.3 % of the waste at 0.44 % newly killed"
    assert f"{newer}  trained on ? jobs, {said} (-8.4 % net of the kills)" in out
    assert f"{older}  trained on ? jobs, {said}" in out and f"{said} (" not in out.split(older)[1]


@pytest.mark.timeout(10)  # open() of a FIFO waits for a writer: a regression fails, not hangs
def test_models_lists_a_version_whose_notes_are_fifos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ModelStore(tmp_path)
    version = publish(store, 1)[0]
    os.mkfifo(store.target_dir(Target.TIME) / version / PROMOTION_FILE)
    assert main(["models", "--store", str(tmp_path)]) == 0
    said = "verdict unreadable: a FIFO, not a regular file"  # and refused: it may hide a refusal
    assert f"* {version}  trained on 0 jobs, {said}" in capsys.readouterr().out
    card = store.target_dir(Target.TIME) / version / CARD_FILE
    card.unlink()
    os.mkfifo(card)  # the version is no longer complete: listed no more
    assert main(["models", "--store", str(tmp_path)]) == 0
    assert "time: no model" in capsys.readouterr().out


def test_models_lists_versions_whose_card_or_verdict_is_hostile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nesting past json's recursion, a card that is no object or whose training is no table: each
    version is listed with what is wrong (before, a RecursionError or AttributeError ended it)."""
    store = ModelStore(tmp_path)
    deep, listed, odd = publish(store, 3)
    nested = b'{"promote": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for version, card in ((deep, nested), (listed, b"[1, 2]"), (odd, b'{"training": 7}')):
        (store.target_dir(Target.TIME) / version / CARD_FILE).write_bytes(card)
    (store.target_dir(Target.TIME) / deep / PROMOTION_FILE).write_bytes(nested)
    assert main(["models", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"  {deep}  (card unreadable: nested too deeply to read)" in out
    assert f"  {listed}  (card unreadable: not a JSON object)" in out
    assert f"* {odd}  trained on ? jobs" in out


def test_rollback_serves_the_previous_or_a_named_version(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    versions = publish(store, 3)
    assert main(["rollback", "--store", str(tmp_path)]) == 0
    assert store.current_version(Target.TIME) == versions[1]
    assert main(["rollback", "--store", str(tmp_path), versions[2]]) == 0
    assert store.current_version(Target.TIME) == versions[2]
    assert main(["rollback", "--store", str(tmp_path), "20000101T000000.000000Z"]) == 1
    assert store.current_version(Target.TIME) == versions[2]


@pytest.mark.parametrize(
    "verdict", [b'{"promote": false}', b'{"promote": fa', b"[]"], ids=["refused", "cut-short", "a-list"]
)
def test_rollback_skips_a_challenger_refused_at_promotion(tmp_path: Path, verdict: bytes) -> None:
    """Refused, or with a verdict that cannot be read (it may be a refusal): skipped."""
    store = ModelStore(tmp_path)
    champion, refused, serving = publish(store, 3)
    (store.target_dir(Target.TIME) / refused / PROMOTION_FILE).write_bytes(verdict)
    assert main(["rollback", "--store", str(tmp_path)]) == 0
    assert store.current_version(Target.TIME) == champion
    assert main(["rollback", "--store", str(tmp_path), refused]) == 0  # named: served as asked
    assert store.current_version(Target.TIME) == refused != serving


def test_rollback_waits_for_no_writer_unless_forced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`harp rollback` took no lock: a nightly promoting meanwhile moved CURRENT again, from the
    champion it read before the rollback. It takes the writer lock, and says who holds it."""
    store = ModelStore(tmp_path)
    versions = publish(store, 3)
    with store.writer():  # another open file description: held as another process would hold it
        assert main(["rollback", "--store", str(tmp_path)]) == 75
        assert store.current_version(Target.TIME) == versions[2]
        assert f"is held by another harp train or nightly (pid {os.getpid()}): not rolled back" in caplog.text
        assert main(["rollback", "--store", str(tmp_path), "--force"]) == 0
        assert store.current_version(Target.TIME) == versions[1]
    assert main(["rollback", "--store", str(tmp_path), versions[2]]) == 0
    assert store.current_version(Target.TIME) == versions[2]


def test_rollback_with_nothing_older_fails(tmp_path: Path) -> None:
    publish(ModelStore(tmp_path), 1)
    assert main(["rollback", "--store", str(tmp_path)]) == 1


@pytest.mark.parametrize("command", ["models", "rollback"])
def test_a_store_that_is_no_directory_is_said_exit_2(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A mistyped --store or $HARP_STORE listed "no model" for each target with exit 0; a rollback
    made the directory (for its lock) before finding nothing to roll back to."""
    (tmp_path / "file").write_text("")
    for store in (tmp_path / "absent", tmp_path / "file"):
        assert main([command, "--store", str(store)]) == 2
        assert f"no model store at {store}" in caplog.text and "no model\n" not in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_prune_keeps_the_newest_and_the_serving_version(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    versions = publish(store, 5)
    store.set_current(Target.TIME, versions[0])  # rolled back to the oldest
    removed = prune(store, Target.TIME, keep=2)
    assert removed == versions[1:3]
    assert store.versions(Target.TIME) == [versions[0], *versions[3:]]
    assert not list(store.target_dir(Target.TIME).glob(".trash-*"))
    with pytest.raises(ValueError):
        prune(store, Target.TIME, keep=0)


def test_prune_does_not_say_removed_what_it_could_not_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A version copied in by root (its files not the harp user's to delete) was renamed out of the
    store, kept all its files, and was logged `removed ...` all the same."""
    store = ModelStore(tmp_path)
    versions = publish(store, 3)
    monkeypatch.setattr("slurm_harp.model.retention.shutil.rmtree", lambda path, ignore_errors=False: None)
    with caplog.at_level("INFO", logger="slurm_harp.model.retention"):
        assert prune(store, Target.TIME, keep=2) == versions[:1]  # no longer a version either way
    assert f"version {versions[0]} withdrawn (as .trash-{versions[0]}) but not all" in caplog.text
    assert "removed time model" not in caplog.text
    assert (store.target_dir(Target.TIME) / f".trash-{versions[0]}").is_dir()


def test_prune_keeps_the_champions_behind_refused_challengers(tmp_path: Path) -> None:
    """Nights of refused challengers are the newest versions: kept by count alone, they left no
    champion for the fallback or `harp rollback` (both skip refused versions)."""
    store = ModelStore(tmp_path)
    older, serving, *challengers = publish(store, 5)
    store.set_current(Target.TIME, serving)
    for version in challengers:
        store.write_verdict(Target.TIME, version, {"promote": False})
    assert prune(store, Target.TIME, keep=2) == [challengers[0]]
    assert store.versions(Target.TIME) == [older, serving, *challengers[1:]]
    assert main(["rollback", "--store", str(tmp_path)]) == 0
    assert store.current_version(Target.TIME) == older


@pytest.mark.parametrize("damage", ["garbage", "a-link", "a-missing-version"])
def test_models_and_rollback_go_on_when_current_is_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """The recovery tool failed when needed: `harp models` and `harp rollback` ended in a traceback
    on a CURRENT that was not a version name or was a link; a CURRENT naming a version not in the
    store was listed without a word."""
    store = ModelStore(tmp_path)
    older, newer = publish(store, 2)
    pointer = store.target_dir(Target.TIME) / "CURRENT"
    said = {
        "garbage": f"CURRENT unreadable: {pointer}: bad version name 'garbage'",
        "a-link": "CURRENT unreadable: ",
        "a-missing-version": "CURRENT names 20991231T000000.000000Z, which is not a complete version",
    }[damage]
    if damage == "garbage":
        pointer.write_text("garbage\n")
    elif damage == "a-link":
        pointer.unlink()
        pointer.symlink_to("/etc/hostname")
    else:
        pointer.write_text("20991231T000000.000000Z\n")
    assert main(["models", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"time:\n  {said}" in out and f"    {newer}  trained on 1 jobs" in out and "*" not in out
    assert main(["rollback", "--store", str(tmp_path), older]) == 0
    assert not pointer.is_symlink() and store.current_version(Target.TIME) == older
    assert Path("/etc/hostname").read_text()  # the link was replaced, not written through


def test_models_lists_a_card_whose_figures_are_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ModelStore(tmp_path)
    figures = {"waste_cut_pct": "12", "newly_killed_pct": 0.4, "net_cut_pct": "x"}
    version = store.publish(Target.TIME, {"q0.90.onnx": b"x"}, {"calibration": {"validation": figures}})
    assert main(["models", "--store", str(tmp_path)]) == 0
    assert f"* {version}  trained on ? jobs\n" in capsys.readouterr().out


def test_prune_keeps_what_the_fallback_serves_and_nothing_goes_while_current_is_unreadable(
    tmp_path: Path,
) -> None:
    """A serving version that does not load makes the daemon serve the newest one before it; new
    versions without verdicts (--promote never) pushed that one out, leaving nothing to serve after
    a restart. And with a damaged CURRENT, prune raised after the run had published."""
    store = ModelStore(tmp_path)
    fallback, serving, *unjudged = publish(store, 4)
    store.set_current(Target.TIME, serving)
    assert prune(store, Target.TIME, keep=1) == unjudged[:1]
    assert store.versions(Target.TIME) == [fallback, serving, unjudged[1]]
    (store.target_dir(Target.TIME) / "CURRENT").write_text("garbage\n")
    store.publish(Target.TIME, {"q0.90.onnx": b"x"}, {}, make_current=False)
    assert prune(store, Target.TIME, keep=1) == []
    assert len(store.versions(Target.TIME)) == 4


def test_prune_spares_a_version_rolled_back_to_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harp rollback` takes no lock: landing between prune's reading of CURRENT and its deletions,
    it left CURRENT naming a deleted version."""
    store = ModelStore(tmp_path)
    versions = publish(store, 5)
    discard = retention.discard

    def rollback_meanwhile(store: ModelStore, target: Target, version: str) -> None:
        store.set_current(Target.TIME, versions[1])
        discard(store, target, version)

    monkeypatch.setattr(retention, "discard", rollback_meanwhile)
    assert prune(store, Target.TIME, keep=1) == [versions[0], versions[2]]
    assert store.current_version(Target.TIME) == versions[1] in store.versions(Target.TIME)


def test_rollback_serves_only_a_version_that_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """It switched CURRENT to a version with a damaged model file and said "now serving": the
    running daemon rejected it, and after a restart served nothing (the fallback looks only at
    older versions)."""
    store = ModelStore(tmp_path)
    older, damaged, serving = publish(store, 3)
    onnx = store.target_dir(Target.TIME) / damaged / "q0.90.onnx"
    onnx.write_bytes(onnx.read_bytes()[:100])
    assert main(["rollback", "--store", str(tmp_path), damaged]) == 1
    assert f"time: not serving {damaged}: it does not load; {serving} still serves" in caplog.text
    assert store.current_version(Target.TIME) == serving
    assert main(["rollback", "--store", str(tmp_path)]) == 0  # skips it for the one before
    assert f"version {damaged} does not load: " in caplog.text
    assert store.current_version(Target.TIME) == older


def test_rollback_refuses_a_version_that_is_a_link(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """It switched CURRENT to a version linked out of the store, exit 0, "now serving": the daemon
    then refused that CURRENT and kept the old model."""
    store = ModelStore(tmp_path / "store")
    linked, serving = publish(store, 2)
    outside = tmp_path / "outside"
    (store.target_dir(Target.TIME) / linked).rename(outside)
    (store.target_dir(Target.TIME) / linked).symlink_to(outside)
    assert main(["rollback", "--store", str(store.root), linked]) == 1
    link = store.target_dir(Target.TIME) / linked
    said = f"time: not serving {linked}: {link} is a symbolic link: the store serves only its own files"
    assert said in caplog.text
    assert main(["rollback", "--store", str(store.root)]) == 1  # nothing older of the store's own
    assert store.current_version(Target.TIME) == serving


def test_models_lists_a_card_larger_than_any_harp_writes_without_reading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ModelStore(tmp_path)
    (version,) = publish(store, 1)
    card = store.target_dir(Target.TIME) / version / CARD_FILE
    card.write_bytes(b'{"training": {"rows_train": 1}, "pad": "' + b"x" * (4 * 1024 * 1024) + b'"}')
    assert main(["models", "--store", str(tmp_path)]) == 0
    assert f"* {version}  (card unreadable: {card}: larger than 4194304 bytes)" in capsys.readouterr().out


def test_sweep_removes_a_stale_leftover_that_is_a_link_and_reports_only_what_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """rmtree refuses a link and, told to ignore errors, said nothing: a `.trash-` link (left by
    discarding a linked version) was reported removed at every run, and stayed. The link is
    unlinked (what it points at untouched); what cannot be removed is logged, not reported."""
    store = ModelStore(tmp_path / "store")
    target_dir = store.target_dir(Target.TIME)
    target_dir.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x")
    link, stuck = target_dir / ".trash-linked", target_dir / ".tmp-stuck"
    link.symlink_to(elsewhere)
    stuck.mkdir()
    old = time.time() - retention.STALE_TEMP_S - 60
    for path in (link, stuck):
        os.utime(path, (old, old), follow_symlinks=False)
    monkeypatch.setattr(shutil, "rmtree", lambda path, ignore_errors: None)  # it stays
    assert retention.sweep(store, Target.TIME) == [".trash-linked"]
    assert not os.path.lexists(link) and (elsewhere / "keep").read_text() == "x"
    assert stuck.is_dir()
    assert f"cannot remove {stuck}, left by an interrupted publish, prune or replacement" in caplog.text
    assert retention.sweep(store, Target.TIME) == []
