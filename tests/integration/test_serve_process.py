"""`harp serve` as a real process: start, answer, SIGHUP reload, SIGTERM drain."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from tests.integration.harp_client import Client


def wait_serving(sock: Path, proc: subprocess.Popen[str], timeout: float = 30) -> Client:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if sock.exists():
            client = Client(sock)
            try:
                if client.status() == "SERVING":
                    return client
            except grpc.RpcError:
                pass
            client.close()
        time.sleep(0.05)
    raise AssertionError("daemon did not become SERVING")


def test_serve_reload_and_terminate(tmp_path: Path, trained_store: Path) -> None:
    sock = tmp_path / "run" / "harp.sock"
    conf = tmp_path / "harp.toml"
    base = f'[server]\nsocket = "{sock}"\nstore_poll_seconds = 3600\n[store]\npath = "{trained_store}"\n'
    conf.write_text(base + '[policy]\nmode = "shadow"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = wait_serving(sock, proc)
        assert client.predict(time_limit_minutes=600).mode == "shadow"
        conf.write_text(base + '[policy]\nmode = "off"\n')
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while client.predict(time_limit_minutes=600).mode != "off":
            assert time.monotonic() < deadline, "SIGHUP did not reload the policy"
            time.sleep(0.05)
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not sock.exists()
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "SIGHUP: reloading" in log and "stopped" in log


def test_bad_config_exits_with_a_message(tmp_path: Path) -> None:
    conf = tmp_path / "harp.toml"
    conf.write_text("[policy]\nmod = 'shadow'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert f"{conf}: policy.mod: unknown key" in proc.stderr
