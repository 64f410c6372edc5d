"""`harp serve` reads the memory slurmctld gives a job that asks none with scontrol, as it starts
and again after a SIGHUP (server.slurm_memory_defaults), and says what it read; a scontrol that
fails is said once and the daemon serves on, and one that hangs holds up neither the daemon's
signals nor its submissions. scontrol is faked at the subprocess boundary: a script first on PATH
printing what a real slurmctld 22.05 printed (tests/unit/test_memory_default.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_serve_process import StderrLines, wait_serving
from tests.unit.test_memory_default import CONFIG, NODE, PARTITIONS


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
            f'*node*) cat <<"EOF"\n{NODE}EOF\n;;\n*) cat <<"EOF"\n{PARTITIONS}EOF\n;;\nesac\n',
            "memory defaults: slurm.conf 512 MB per CPU; partitions of their own: percpu 300 MB per CPU, "
            "pernode 700 MB per node; a node's memory: batch 22900 MB, percpu 22900 MB, pernode 22900 MB",
        ),
        (
            '#!/bin/sh\necho "Unable to contact slurm controller (connect failure)" >&2\nexit 1\n',
            "memory defaults: cannot read them (none known yet): scontrol show config exited 1: Unable to "
            "contact slurm controller (connect failure); jobs that ask no memory or all of a node's are "
            "served without",
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


def test_a_sighup_reads_them_again(tmp_path: Path, trained_store: Path) -> None:
    """A site that changed a partition's default says so with a SIGHUP, not ten minutes later."""
    config = tmp_path / "config.txt"
    config.write_text(CONFIG)
    (tmp_path / "partitions.txt").write_text(PARTITIONS)
    (tmp_path / "nodes.txt").write_text(NODE)
    fake = (
        f'#!/bin/sh\ncase "$*" in\n*config*) cat {config};;\n*node*) cat {tmp_path / "nodes.txt"};;\n'
        f"*) cat {tmp_path / 'partitions.txt'};;\nesac\n"
    )
    proc, sock = _serve(tmp_path, trained_store, fake)
    try:
        stderr = StderrLines(proc)
        wait_serving(sock, proc).close()
        stderr.wait_for("memory defaults: slurm.conf 512 MB per CPU")
        config.write_text(CONFIG.replace("512", "1024"))
        proc.send_signal(signal.SIGHUP)
        stderr.wait_for("memory defaults: slurm.conf 1024 MB per CPU")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.alone  # times itself against the wall clock (scripts/test)
def test_a_hanging_scontrol_holds_up_neither_sigterm_nor_submissions(
    tmp_path: Path, trained_store: Path
) -> None:
    """With slurmctld down scontrol waits for it up to its timeout (10 s a call): read in the loop's
    own thread, that delayed a SIGTERM as long."""
    proc, sock = _serve(tmp_path, trained_store, "#!/bin/sh\nexec sleep 20\n")
    try:
        stderr = StderrLines(proc)
        client = wait_serving(sock, proc)
        assert client.predict(time_limit_minutes=600).mode
        client.close()
        time.sleep(1)  # the loop has started the reading
        stopping = time.monotonic()
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - stopping < 5, stderr.lines
        assert not any("memory defaults" in line for line in stderr.lines)  # none read, none failed yet
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
