"""`harp` as a process whose standard output cannot be written: a full disk behind a redirect
(/dev/full), a pipe whose reader has gone (`harp models | head -1`)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.request import Target
from slurm_harp.model.store import ModelStore
from tests.unit.test_promotion import regular_users
from tests.unit.test_sacct import SACCT_TEXT

CANNOT = "harp: cannot write standard output: No space left on device"


def _harp(*args: str, stdout: int) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "slurm_harp.cli", *args]
    return subprocess.run(argv, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300, check=False)


def _full(*args: str) -> subprocess.CompletedProcess[str]:
    with open("/dev/full", "wb") as full:
        return _harp(*args, stdout=full.fileno())


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A config whose job store holds jobs with a run time, a CPU use and a memory peak: every
    target trains."""
    db = tmp_path / "jobs.sqlite"
    with JobStore(db) as store:
        jobs = [
            dataclasses.replace(
                r,
                request=dataclasses.replace(r.request, mem_per_node_mb=8000),
                total_cpu_s=4.0 * r.elapsed_s,
                max_rss_mb=1000.0 + 10 * (i % 7),
            )
            for i, r in enumerate(regular_users(700))
        ]
        store.merge(jobs, "x")
    config = tmp_path / "harp.toml"
    models = tmp_path / "models"
    config.write_text(f'[store]\npath = "{models}"\n[history]\ndb = "{db}"\n[training]\ntrees = 10\n')
    return config


def test_nightly_to_a_full_disk_publishes_every_target(site: Path, tmp_path: Path) -> None:
    """It published the first target, then ended in an OSError traceback printing it: memory and
    cpus were never trained. Each target is published; the lines that could not be printed are
    logged, and said once at the end, exit 1."""
    done = _full("nightly", "--config", str(site), "--skip-harvest")
    assert "Traceback" not in done.stderr
    store = ModelStore(tmp_path / "models")
    assert all(store.current_version(target) is not None for target in Target)
    assert done.stderr.splitlines().count(CANNOT) == 1
    assert done.returncode == 1


def test_import_to_a_full_disk_imports_every_file(tmp_path: Path) -> None:
    """`harp import a b > /dev/full` imported a, then ended in a traceback: b was never imported."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text(SACCT_TEXT)
    second.write_text(SACCT_TEXT)
    db = tmp_path / "jobs.sqlite"
    done = _full("import", "--db", str(db), str(first), str(second))
    assert "Traceback" not in done.stderr and done.stderr.splitlines().count(CANNOT) == 1
    assert done.returncode == 1
    with JobStore(db, readonly=True) as store:
        assert store.sources() == ["a", "b"]


def test_a_reader_gone_is_a_quiet_exit_1(tmp_path: Path) -> None:
    """`harp models | head -1`: a BrokenPipeError traceback. Now nothing on stderr, exit 1 (as
    Python's signal docs do on EPIPE)."""
    store = ModelStore(tmp_path / "models")
    for target in Target:
        store.target_dir(target).mkdir(parents=True)
    read, write = os.pipe()
    os.close(read)
    try:
        done = _harp("models", "--store", str(store.root), stdout=write)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")
