"""A version directory the caller may not enter (copied in by root with umask 077: root:root 0700,
where the daemon runs as the store's group). Python 3.11's Path.is_file raised PermissionError on
its card, so store.versions() failed for the whole target: the daemon served nothing at a restart
when CURRENT named it, `harp models` and `harp rollback` ended in a traceback, and prune failed
every night. It is a version whose load fails, naming the error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.core.request import Target
from slurm_harp.model.retention import prune
from slurm_harp.model.store import ModelStore
from slurm_harp.server.reloader import reload_models
from tests.unit.test_models_cli import publish

LockOut = Callable[[Path], None]


def test_a_version_that_cannot_be_entered_is_listed_and_named(tmp_path: Path, lock_out: LockOut) -> None:
    store = ModelStore(tmp_path)
    older, locked = publish(store, 2)
    lock_out(store.target_dir(Target.TIME) / locked)
    assert store.versions(Target.TIME) == [older, locked]
    assert store.unreadable(Target.TIME, older) is None
    assert "Permission denied" in str(store.unreadable(Target.TIME, locked))
    with pytest.raises(ValueError, match=rf"version {locked} under .* cannot be read: .*Permission denied"):
        store.version_dir(Target.TIME, locked)
    store.set_current(Target.TIME, older)
    assert store.current_version(Target.TIME) == older


@pytest.mark.parametrize("current", ["names-it", "garbage"])
def test_the_daemon_at_start_serves_the_newest_older_version_it_can_read(
    tmp_path: Path, lock_out: LockOut, caplog: pytest.LogCaptureFixture, current: str
) -> None:
    """docs/training.md: the newest older version that loads serves. It stopped at `cannot list the
    older time versions: [Errno 13] Permission denied`, the target unserved."""
    store = ModelStore(tmp_path)
    _, good, locked = publish(store, 3)
    lock_out(store.target_dir(Target.TIME) / locked)
    if current == "garbage":  # CURRENT unreadable: the fallback passes over the newest it cannot read
        (store.target_dir(Target.TIME) / "CURRENT").write_text("garbage\n")
    result = reload_models(store.root, {}, None)
    assert result.models[Target.TIME].version == good
    assert "cannot list" not in caplog.text
    if current == "names-it":
        assert f"rejected model {store.target_dir(Target.TIME) / locked} for time" in caplog.text
        assert "Permission denied" in result.rejected[0] and f"serving the older {good}" in caplog.text
    else:
        assert f"older model {locked} for time has an unreadable verdict" in caplog.text


def test_models_lists_it_as_unreadable_and_rollback_goes_on(
    tmp_path: Path, lock_out: LockOut, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    store = ModelStore(tmp_path)
    older, good, locked = publish(store, 3)
    lock_out(store.target_dir(Target.TIME) / locked)
    assert main(["models", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"* {locked}  (card unreadable: [Errno 13] Permission denied" in out
    assert f"  {good}  trained on 1 jobs" in out and f"  {older}  trained on 0 jobs" in out
    assert main(["rollback", "--store", str(tmp_path), locked]) == 1
    assert f"time: not serving {locked}: version {locked} under" in caplog.text
    # (To `older`, it would withdraw `good` too: a rollback marks each version it goes back past.)
    assert main(["rollback", "--store", str(tmp_path), "--force", good]) == 0
    assert store.current_version(Target.TIME) == good
    (store.target_dir(Target.TIME) / "CURRENT").write_text(f"{locked}\n")  # as it was
    assert main(["rollback", "--store", str(tmp_path)]) == 0  # the one before it
    assert store.current_version(Target.TIME) == good


def test_prune_keeps_a_version_it_cannot_read_and_says_so(
    tmp_path: Path, lock_out: LockOut, caplog: pytest.LogCaptureFixture
) -> None:
    """It failed every night (`could not prune older versions: [Errno 13] ...`, exit 1) and versions
    piled up. What cannot be looked at is never deleted (nor could it be, whole): the others are
    pruned as if it were not there."""
    store = ModelStore(tmp_path)
    oldest, locked, fallback, serving = publish(store, 4)
    lock_out(store.target_dir(Target.TIME) / locked)
    caplog.set_level(logging.WARNING)
    assert prune(store, Target.TIME, keep=1) == [oldest]
    assert store.versions(Target.TIME) == [locked, fallback, serving]
    assert f"time: version {locked} cannot be read ([Errno 13] Permission denied" in caplog.text
    assert "not pruned" in caplog.text
