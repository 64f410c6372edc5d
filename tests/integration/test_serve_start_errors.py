"""`harp serve` processes whose sockets cannot be made: one line, its exit code, nothing left behind.

Before, a socket directory that could not be made (a file on its path, /proc) and an advice socket
whose relay socket was too long for a Unix socket were tracebacks after `harp check-config` said
ok, leaving the submission socket and the relay's `.harp-advice-*` directory: under Restart=always,
one more directory at every start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_harp.server.socket_path import SUN_PATH_MAX, inner_socket
from tests.integration.test_serve_process import serve_to_exit, serving, wait_serving


def config(tmp_path: Path, sock: Path, advice: Path | None, store: Path) -> Path:
    conf = tmp_path / "harp.toml"
    text = f'[server]\nsocket = "{sock}"\nstore_poll_seconds = 3600\n[store]\npath = "{store}"\n'
    conf.write_text(text + ("" if advice is None else f'[advice]\nsocket = "{advice}"\n'))
    return conf


def leftovers(*where: Path) -> list[Path]:
    """Sockets and relay directories under ``where``."""
    found: list[Path] = []
    for top in where:
        if top.is_dir():
            found += [p for p in top.rglob("*") if p.is_socket() or p.name.startswith(".harp-advice-")]
    return found


def advice_of(tmp_path: Path, inner_bytes: int) -> Path:
    """An advice socket path whose relay socket beside it is ``inner_bytes`` long."""
    short = tmp_path / "a" / "advice.sock"
    pad = inner_bytes - len(os.fsencode(inner_socket(short)))
    assert pad >= 0, "pytest's tmp_path is too long for this test"
    return tmp_path / ("a" * (1 + pad)) / "advice.sock"


def said_once(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """``what`` on the one error line; no traceback."""
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and what in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("where", ["server.socket", "advice.socket"])
def test_a_socket_directory_under_a_file_is_one_line_and_nothing_left(
    short_tmp: Path, trained_store: Path, where: str
) -> None:
    (short_tmp / "afile").write_text("x")
    under_file, sock = short_tmp / "afile" / "x.sock", short_tmp / "run" / "harp.sock"
    sock, advice = (under_file, None) if where == "server.socket" else (sock, under_file)
    proc = serve_to_exit(config(short_tmp, sock, advice, trained_store))
    assert proc.returncode == 1
    said_once(proc, f"not starting: socket directory {under_file.parent}: cannot make it: a file on its path")
    assert leftovers(short_tmp) == []


def test_a_socket_directory_on_proc_is_one_line(tmp_path: Path, trained_store: Path) -> None:
    proc = serve_to_exit(config(tmp_path, Path("/proc/harp-test/harp.sock"), None, trained_store))
    assert proc.returncode == 1
    said_once(proc, "not starting: socket directory /proc/harp-test: cannot make it: ")


def test_an_advice_socket_too_long_for_its_relay_is_refused_before_binding(
    tmp_path: Path, trained_store: Path
) -> None:
    sock = tmp_path / "run" / "harp.sock"
    advice = advice_of(tmp_path, SUN_PATH_MAX + 1)
    conf = config(tmp_path, sock, advice, trained_store)
    check = subprocess.run(
        [sys.executable, "-m", "slurm_harp.cli", "check-config", str(conf)], capture_output=True, text=True
    )
    problem = f"{conf}: advice.socket: {advice}: the relay's socket beside it"
    assert check.returncode == 2 and problem in check.stderr and "108 bytes, over the 107" in check.stderr
    proc = serve_to_exit(conf)
    assert proc.returncode == 2
    said_once(proc, problem)
    assert leftovers(tmp_path) == [] and not advice.parent.exists()


def test_an_advice_socket_whose_relay_socket_is_107_bytes_serves(tmp_path: Path, trained_store: Path) -> None:
    """The limit is grpcio's own: a relay socket of 107 bytes binds."""
    sock = tmp_path / "run" / "harp.sock"
    advice = advice_of(tmp_path, SUN_PATH_MAX)
    conf = config(tmp_path, sock, advice, trained_store)
    with serving(conf) as proc:
        wait_serving(sock, proc).close()
        assert advice.is_socket()
        relay_dirs = list(advice.parent.glob(".harp-advice-*"))
        assert [len(os.fsencode(d / "grpc.sock")) for d in relay_dirs] == [SUN_PATH_MAX]
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("key", ["server.socket", "advice.socket"])
def test_a_socket_path_too_long_to_bind_is_refused_before_anything_is_made(
    tmp_path: Path, trained_store: Path, key: str
) -> None:
    """Before, check-config said ok, then `harp serve` made the socket's directory, failed to bind
    (grpcio's "Failed to bind", exit 1) and left the directory behind."""
    short, run = tmp_path / "run" / "harp.sock", tmp_path / "run"
    too_long = run / ("b" * (SUN_PATH_MAX + 1 - len(os.fsencode(run / ".sock"))) + ".sock")
    assert len(os.fsencode(too_long)) == SUN_PATH_MAX + 1
    sock, advice = (too_long, None) if key == "server.socket" else (short, too_long)
    conf = config(tmp_path, sock, advice, trained_store)
    check = subprocess.run(
        [sys.executable, "-m", "slurm_harp.cli", "check-config", str(conf)], capture_output=True, text=True
    )
    problem = f"{conf}: {key}: {too_long} is a path of {SUN_PATH_MAX + 1} bytes, over the {SUN_PATH_MAX}"
    assert check.returncode == 2 and problem in check.stderr, check.stderr
    proc = serve_to_exit(conf)
    assert proc.returncode == 2
    said_once(proc, problem)
    assert not run.exists()
