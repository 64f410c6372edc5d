"""`harp serve` reads the memory slurmctld gives a job that asks none with scontrol, as it starts
(server.slurm_memory_defaults), and says what it read; a scontrol that fails is said once and the
daemon serves on. scontrol is faked at the subprocess boundary: a script first on PATH printing what
a real slurmctld 22.05 printed (tests/unit/test_memory_default.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_serve_process import StderrLines, wait_serving
from tests.unit.test_memory_default import CONFIG, PARTITIONS


def _serve(tmp_path: Path, trained_store: Path, scontrol: str) -> tuple[subprocess.Popen[str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "scontrol"
    fake.write_text(scontrol)
    fake.chmod(0o755)
    sock = tmp_path / "run" / "harp.sock"
    conf = tmp_path / "harp.toml"
    conf.write_text(f'[server]\nsocket = "{sock}"\n[store]\npath = "{trained_store}"\n')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env), sock


@pytest.mark.parametrize(
    ("scontrol", "said"),
    [
        (
            f'#!/bin/sh\ncase "$*" in\n*config*) cat <<"EOF"\n{CONFIG}EOF\n;;\n'
            f'*) cat <<"EOF"\n{PARTITIONS}EOF\n;;\nesac\n',
            "memory defaults: slurm.conf 512 MB per CPU; partitions of their own: percpu 300 MB per CPU, "
            "pernode 700 MB per node",
        ),
        (
            '#!/bin/sh\necho "Unable to contact slurm controller (connect failure)" >&2\nexit 1\n',
            "memory defaults: cannot read them (none known yet): scontrol show config exited 1: Unable to "
            "contact slurm controller (connect failure); jobs that ask no memory are served without",
        ),
    ],
    ids=["read", "scontrol failing"],
)
def test_serve_reads_the_memory_defaults_as_it_starts(
    tmp_path: Path, trained_store: Path, scontrol: str, said: str
) -> None:
    proc, sock = _serve(tmp_path, trained_store, scontrol)
    try:
        stderr = StderrLines(proc)
        client = wait_serving(sock, proc)
        stderr.wait_for(said)
        assert client.predict(time_limit_minutes=600).mode  # serving all the same
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert sum("memory defaults" in line for line in stderr.lines) == 1
