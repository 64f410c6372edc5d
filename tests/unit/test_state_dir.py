"""State created by harp run as root belongs to the state directory's owner, 0640/0750: the
install step that trains a first model by hand must not break the slurm-harp timers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path

import pytest

from slurm_harp.accounting import read_sacct
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.request import Target
from slurm_harp.model.store import ModelStore
from slurm_harp.state_dir import make_dirs
from tests.conftest import REPO
from tests.unit.test_sacct import SACCT_TEXT

NOBODY = 65534


def modes_and_owners(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_mode & 0o777, p.lstat().st_uid, p.lstat().st_gid)
        for p in [root, *root.rglob("*")]
    }


def test_state_is_private_to_the_service_user_and_group(tmp_path: Path) -> None:
    with JobStore(tmp_path / "db" / "jobs.sqlite") as store:
        store.merge(read_sacct(SACCT_TEXT.splitlines()), "sacct")
    ModelStore(tmp_path / "models").publish(Target.TIME, {"q0.50.onnx": b"x"}, {"quantiles": []})
    for name, (mode, _, _) in modes_and_owners(tmp_path).items():
        if name == ".":
            continue
        path = tmp_path / name
        assert mode == (0o750 if path.is_dir() else 0o640), name


@pytest.mark.skipif(os.geteuid() != 0, reason="owning files as another user needs root")
def test_run_as_root_state_belongs_to_the_state_directory_owner() -> None:
    top = Path(tempfile.mkdtemp(prefix="harp-state-"))  # pytest's tmp_path is root's alone
    top.chmod(0o755)
    # In a fresh interpreter: the check forks, and in this one earlier tests may have left grpc's
    # threads, whose fork handler then waits for them for ever (seen once in a full suite).
    code = "import sys, pathlib; from tests.unit.test_state_dir import check_root_run_state as c; "
    code += "c(pathlib.Path(sys.argv[1]))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(top / "var-lib-slurm-harp")],
            cwd=REPO, env={**os.environ, "PYTHONPATH": f"{REPO / 'daemon'}:{REPO}"},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(top)


def check_root_run_state(state: Path) -> None:
    state.mkdir(0o750)
    os.chown(state, NOBODY, NOBODY)
    with JobStore(state / "jobs.sqlite") as store:
        store.merge(read_sacct(SACCT_TEXT.splitlines()), "sacct")
        # While open (WAL), the -wal and -shm files exist: the service user must own them too.
        assert {p.name for p in state.iterdir()} >= {"jobs.sqlite", "jobs.sqlite-wal", "jobs.sqlite-shm"}
        wal_owners = {p.name: p.stat().st_uid for p in state.iterdir()}
        assert set(wal_owners.values()) == {NOBODY}, wal_owners
    models = ModelStore(state / "models")
    version = models.publish(Target.TIME, {"q0.50.onnx": b"x"}, {"quantiles": []})
    models.write_verdict(Target.TIME, version, {"ok": True})
    owners = {name: (uid, gid) for name, (_, uid, gid) in modes_and_owners(state).items()}
    assert set(owners.values()) == {(NOBODY, NOBODY)}, owners
    # And the service user can go on: append to the job store, publish the next version.
    # strptime imports its module on first use: import it here, as the child may not read this
    # Python's library (a pyenv under /root).
    datetime.strptime("2026", "%Y")
    pid = os.fork()
    if pid == 0:  # the child becomes the service user
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            JobStore(state / "jobs.sqlite").close()
            models.publish(Target.TIME, {"q0.50.onnx": b"y"}, {"quantiles": []})
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert len(models.versions(Target.TIME)) == 2


def test_a_link_swapped_in_for_a_directory_just_made_is_refused_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(0o700)
    elsewhere.chmod(0o700)
    made = tmp_path / "state" / "models"
    real_mkdir = os.mkdir

    def mkdir_then_swap(path: str | os.PathLike[str], mode: int = 0o777, **kwargs: object) -> None:
        real_mkdir(path, mode)
        if Path(path) == made:  # between mkdir and chmod, whoever may write in state/ swaps it
            os.rmdir(path)
            os.symlink(elsewhere, path)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    with pytest.raises(OSError, match="no longer the directory harp made") as raised:
        make_dirs(made)
    assert raised.value.filename == str(made)
    assert elsewhere.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o750
