from __future__ import annotations

import hashlib
import json
import os
import resource
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path

import pytest

from slurm_harp.core.request import Target
from slurm_harp.model import store as store_module
from slurm_harp.model.retention import prune
from slurm_harp.model.store import LinkedTarget, ModelStore

FILES = {"q0.50.onnx": b"model fifty", "q0.90.onnx": b"model ninety"}
CARD = {
    "format": 1,
    "features": ["a", "b"],
    "quantiles": [{"quantile": 0.5, "file": "q0.50.onnx"}, {"quantile": 0.9, "file": "q0.90.onnx"}],
}


def test_publish_writes_a_complete_version_and_points_current_at_it(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    assert store.current_dir(Target.TIME) is None and store.versions("time") == []
    version = store.publish(Target.TIME, FILES, CARD)
    directory = store.current_dir(Target.TIME)
    assert directory == tmp_path / "time" / version
    assert (tmp_path / "time" / "CURRENT").read_text().strip() == version
    for name, data in FILES.items():
        assert (directory / name).read_bytes() == data
    card = json.loads((directory / "card.json").read_text())
    assert (card["target"], card["version"], card["format"]) == ("time", version, 1)
    assert card["created"]
    sums = {q["file"]: q["sha256"] for q in card["quantiles"]}
    assert sums == {n: hashlib.sha256(d).hexdigest() for n, d in FILES.items()}
    assert card["files"]["q0.90.onnx"] == {"sha256": sums["q0.90.onnx"], "bytes": len(FILES["q0.90.onnx"])}
    assert store.versions(Target.TIME) == [version]
    assert [p.name for p in (tmp_path / "time").iterdir() if p.name.startswith(".")] == []
    assert os.stat(directory).st_mode & 0o777 == 0o750  # the service user and its group only
    assert os.stat(tmp_path / "time" / "CURRENT").st_mode & 0o777 == 0o640


def test_versions_are_unique_and_ordered_and_current_can_go_back(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    first = store.publish("time", FILES, CARD)
    second = store.publish("time", FILES, CARD)
    third = store.publish("time", FILES, CARD, make_current=False)
    assert len({first, second, third}) == 3
    assert store.versions("time") == [first, second, third]
    assert store.current_version("time") == second
    store.set_current("time", first)
    assert store.current_dir("time") == tmp_path / "time" / first
    with pytest.raises(ValueError, match="no complete version"):
        store.set_current("time", "20990101T000000.000000Z")
    with pytest.raises(ValueError, match="no complete version"):
        store.set_current("time", "../../etc")


def test_bad_inputs_leave_nothing_behind(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    with pytest.raises(ValueError, match="bad model file name"):
        store.publish("time", {"../evil": b"x"}, CARD)
    with pytest.raises(ValueError, match="not being published"):
        store.publish("time", {"q0.50.onnx": b"x"}, CARD)
    with pytest.raises(ValueError):
        store.publish("time", FILES, {**CARD, "metric": float("nan")})  # not valid JSON
    with pytest.raises(ValueError):
        store.publish("walltime", FILES, CARD)  # not a target
    assert store.versions("time") == []
    assert list((tmp_path / "time").iterdir()) == []


def test_current_switches_only_after_the_version_is_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ModelStore(tmp_path)
    good = store.publish("time", FILES, CARD)
    seen_at_switch: list[set[str]] = []
    real_replace = os.replace

    def checking_replace(src: str, dst: str, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        with open(src, opener=lambda name, flags: os.open(name, flags, dir_fd=src_dir_fd)) as new:
            pointed = new.read().strip()
        seen_at_switch.append({p.name for p in (tmp_path / "time" / pointed).iterdir()})
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "replace", checking_replace)  # the os module the store calls
    new = store.publish("time", FILES, CARD)
    assert seen_at_switch == [{"q0.50.onnx", "q0.90.onnx", "card.json"}]
    assert store.current_version("time") == new

    # A failure halfway through writing leaves CURRENT and the version list as they were.
    store.set_current("time", good)
    seen_at_switch.clear()
    real_write = store_module._write_synced
    calls = {"n": 0}

    def failing_write(path: Path, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(store_module, "_write_synced", failing_write)
    with pytest.raises(OSError, match="No space"):
        store.publish("time", FILES, CARD)
    assert store.current_version("time") == good
    assert store.versions("time") == sorted([good, new])
    assert not [p for p in (tmp_path / "time").iterdir() if p.name.startswith(".tmp-")]
    assert seen_at_switch == []


def test_a_garbled_current_is_an_error_and_a_dangling_one_is_none(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.publish("time", FILES, CARD)
    (tmp_path / "time" / "CURRENT").write_text("../../../etc/passwd\n")
    with pytest.raises(ValueError, match="bad version name"):
        store.current_dir("time")
    (tmp_path / "time" / "CURRENT").write_text("20990101T000000.000000Z\n")
    assert store.current_dir("time") is None


@pytest.mark.timeout(10)  # open() of a FIFO waits for a writer: a regression fails, not hangs
def test_a_fifo_as_current_is_refused_naming_it(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.publish(Target.TIME, FILES, CARD)
    current = tmp_path / "time" / "CURRENT"
    current.unlink()
    os.mkfifo(current)
    with pytest.raises(OSError, match=f"{current} is a FIFO, not a regular file"):
        store.current_dir(Target.TIME)


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_current_is_read_once_a_poll_and_never_past_what_harp_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CURRENT is read at every store poll (30 s), and was read whole, twice: one of 1 GiB (a bad
    restore) held the GIL for 3 s, past the plugin's deadline, and grew the daemon by 2 GiB."""
    store = ModelStore(tmp_path)
    version = store.publish(Target.TIME, FILES, CARD)
    pointer = tmp_path / "time" / "CURRENT"
    opened: list[str] = []
    real_open = os.open

    def counted(path: str | Path, *args: int, **kwargs: int) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    assert store.current(Target.TIME).names == version
    assert opened.count(str(pointer)) == 1
    with pointer.open("r+b") as handle:
        handle.truncate(1 << 30)  # the version name, then a sparse tail
    before = _peak_kib()
    current = store.current(Target.TIME)
    assert _peak_kib() - before < 32 * 1024
    assert (current.names, current.path) == (None, None)
    assert current.unreadable == f"{pointer}: larger than 256 bytes: not a CURRENT harp writes"


def test_links_inside_the_store_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = ModelStore(root)
    version = store.publish(Target.TIME, FILES, CARD)
    secret = tmp_path / "secret"
    secret.write_text(version + "\n")
    current = root / "time" / "CURRENT"
    current.unlink()
    current.symlink_to(secret)
    with pytest.raises(OSError, match="is a symbolic link"):
        store.current_version(Target.TIME)
    store.set_current(Target.TIME, version)  # replaces the link with a plain file
    outside = tmp_path / "outside"
    (root / "time" / version).rename(outside)
    (root / "time" / version).symlink_to(outside)
    with pytest.raises(ValueError, match="is a symbolic link"):
        store.current_dir(Target.TIME)
    # The store's root itself may be a link (a site keeps models on another disk).
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    (root / "time" / version).unlink()
    outside.rename(root / "time" / version)
    assert ModelStore(alias).current_dir(Target.TIME) == alias / "time" / version


def test_a_clock_gone_back_names_a_version_after_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Versions published while the clock ran a year ahead, then the clock put right: the next
    version's name still sorts last, so retention prunes the old ones, not the new one (but the
    newest before the serving one: the daemon's fallback)."""
    store = ModelStore(tmp_path)

    class Ahead(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Ahead:
            moment = datetime.now(UTC) + timedelta(days=365)
            return cls.fromtimestamp(moment.timestamp(), tz)

    monkeypatch.setattr(store_module, "datetime", Ahead)
    ahead = [store.publish("time", FILES, CARD) for _ in range(2)]
    monkeypatch.setattr(store_module, "datetime", datetime)
    champion = store.publish("time", FILES, CARD)
    challenger = store.publish("time", FILES, CARD, make_current=False)
    assert store.versions("time") == [*ahead, champion, challenger]
    assert prune(store, Target.TIME, 2) == ahead[:1]
    assert store.versions("time") == [ahead[1], champion, challenger]


def test_a_verdict_is_read_from_promotion_json_and_refused_follows_it(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    judged, unjudged = (store.publish(Target.TIME, FILES, CARD) for _ in range(2))
    store.write_verdict(Target.TIME, judged, {"promote": False, "verdict": "kept"})
    assert store.verdict(Target.TIME, judged) == {"promote": False, "verdict": "kept"}
    assert store.refused(Target.TIME, judged)
    # No promotion.json (--promote always|never, releases before promotion): not refused.
    assert store.verdict(Target.TIME, unjudged) is None and not store.refused(Target.TIME, unjudged)


@pytest.mark.timeout(10)  # open() of a FIFO waits for a writer: a regression fails, not hangs
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"promote": tr', "not JSON"),  # cut short
        (b'{"promote": false, "r": "\xe9t\xe9"}', "not JSON ('utf-8' codec"),  # Latin-1
        (b"[1, 2]", "no verdict in it"),
        (b'{"verdict": "promoted"}', "no verdict in it"),
        (b'{"promote": "true"}', "no verdict in it"),
        (None, "a FIFO, not a regular file"),
        (b'{"promote": true, "kill_rate": NaN}', "not JSON (NaN is not a JSON number)"),
        (b'{"promote": true, "pad": "' + b"x" * (4 * 1024 * 1024) + b'"}', "larger than 4194304 bytes"),
    ],
    ids=["truncated", "not-utf8", "a-list", "no-promote", "promote-a-string", "fifo", "nan", "too-large"],
)
def test_a_verdict_that_cannot_be_read_is_a_refusal_logged_naming_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes | None, problem: str
) -> None:
    """Read as no verdict, it was not refused: the daemon's fallback or `harp rollback` could serve
    a challenger promotion refused. Fail safe: refused, and said where."""
    store = ModelStore(tmp_path)
    version = store.publish(Target.TIME, FILES, CARD)
    path = tmp_path / "time" / version / "promotion.json"
    if content is None:
        os.mkfifo(path)
    else:
        path.write_bytes(content)
    note = store.verdict(Target.TIME, version)
    assert note is not None and note["promote"] is False and problem in note["verdict"]
    assert store.refused(Target.TIME, version)
    assert (store.refusal(Target.TIME, version) or "").startswith(f"has an unreadable verdict ({problem}")
    assert f"{path}: {problem}" in caplog.text and "counts as refused" in caplog.text


def test_a_versions_owner_is_the_target_whose_directory_holds_it(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    time_version = store.publish(Target.TIME, FILES, CARD)
    memory_version = store.publish(Target.MEMORY, FILES, CARD)
    assert store.owner(time_version) is Target.TIME and store.owner(memory_version) is Target.MEMORY
    (tmp_path / "time" / ".hidden").mkdir()
    for name in ("20000101T000000.000000Z", "CURRENT", ".hidden", "../time", ""):
        assert store.owner(name) is None, name


def test_a_version_or_target_directory_that_is_a_link_is_no_version(tmp_path: Path) -> None:
    """Only a CURRENT naming one refused a linked version: the listing (the daemon's fallback,
    `harp rollback`, retention) took it, and CURRENT could be pointed at it."""
    root = tmp_path / "store"
    store = ModelStore(root)
    linked, own = store.publish(Target.TIME, FILES, CARD), store.publish(Target.TIME, FILES, CARD)
    outside = tmp_path / "outside"
    (root / "time" / linked).rename(outside)
    (root / "time" / linked).symlink_to(outside)
    assert store.versions(Target.TIME) == [own]
    said = f"{root / 'time' / linked} is a symbolic link: the store serves only its own files"
    for write in (store.set_current, lambda t, v: store.write_verdict(t, v, {"promote": True})):
        with pytest.raises(ValueError, match=said):
            write(Target.TIME, linked)
    assert store.current_version(Target.TIME) == own and not (outside / "promotion.json").exists()
    # A target's directory linked elsewhere: nothing in it is a version, not even CURRENT is read.
    alias = ModelStore(tmp_path / "alias")
    alias.root.mkdir()
    alias.target_dir(Target.TIME).symlink_to(root / "time")
    assert alias.versions(Target.TIME) == []
    with pytest.raises(ValueError, match=f"{alias.root / 'time'} is a symbolic link"):
        alias.current_version(Target.TIME)
    with pytest.raises(ValueError, match=f"{alias.root / 'time'} is a symbolic link"):
        alias.set_current(Target.TIME, own)
    # Nor is anything published there: a version no check would load, judge or prune piled up
    # night after night. An OSError: train_held reports it as that target's store fault.
    with pytest.raises(LinkedTarget, match=f"{alias.root / 'time'} is a symbolic link"):
        alias.publish(Target.TIME, FILES, CARD)
    assert store.versions(Target.TIME) == [own] and issubclass(LinkedTarget, OSError)


def test_a_stray_version_name_is_passed_over_and_the_last_name_is_a_store_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory named like a version but naming no time (made by hand, a bad restore), even
    empty, failed every publish of its target with a ValueError, and one named at the last
    microsecond there is with an OverflowError: `harp nightly` ended in a traceback, the targets
    after it untrained, night after night. The first is passed over, logged; the second is a store
    fault (an OSError), as a full disk is, which the run logs for that target alone."""
    store = ModelStore(tmp_path)
    first = store.publish(Target.TIME, FILES, CARD)
    stray = tmp_path / "time" / "20261399T000000.000000Z"
    stray.mkdir()
    second = store.publish(Target.TIME, FILES, CARD)
    assert first < second and store.current_version(Target.TIME) == second
    assert f"{stray} is named like a version but names no time: passed over" in caplog.text
    (tmp_path / "time" / "99991231T235959.999999Z").mkdir()
    with pytest.raises(store_module.NoVersionName) as err:
        store.publish(Target.TIME, FILES, CARD)
    assert isinstance(err.value, OSError)
    assert str(err.value) == f"{tmp_path / 'time'}: no version name sorts after 99991231T235959.999999Z"
    assert store.current_version(Target.TIME) == second
    assert [p.name for p in (tmp_path / "time").iterdir() if p.name.startswith(".")] == []
