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


def start_serve(conf: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_daemon_refuses_a_live_socket_and_a_removed_one_comes_back(
    tmp_path: Path, trained_store: Path
) -> None:
    sock = tmp_path / "harp.sock"
    conf = tmp_path / "harp.toml"
    conf.write_text(
        f'[server]\nsocket = "{sock}"\nstore_poll_seconds = 3600\n[store]\npath = "{trained_store}"\n'
    )
    first = start_serve(conf)
    try:
        client = wait_serving(sock, first)
        inode = sock.stat().st_ino
        # Same config, second daemon: it must not unlink and take over the live one's socket.
        second = start_serve(conf)
        _, log = second.communicate(timeout=30)
        assert second.returncode == 1
        assert f"not starting: another daemon is serving on {sock}" in log
        assert sock.stat().st_ino == inode and client.status() == "SERVING"
        client.close()
        # A removed socket (a tmpfiles cleaner, an rm) is bound again within seconds.
        sock.unlink()
        deadline = time.monotonic() + 15
        while not sock.exists():
            assert time.monotonic() < deadline, "the socket was not bound again"
            time.sleep(0.1)
        client = wait_serving(sock, first)
        assert client.predict(time_limit_minutes=600).mode == "shadow"
        assert oct(sock.stat().st_mode & 0o777) == oct(0o660)  # secured like the first one
        client.close()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=15) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.stderr is not None
    assert f"socket {sock} was removed; binding it again" in first.stderr.read()
    # A stale socket of a crashed daemon is removed and taken (nothing answers on it).
    import socket as socket_module

    stale = socket_module.socket(socket_module.AF_UNIX)
    stale.bind(str(sock))
    stale.close()
    third = start_serve(conf)
    try:
        wait_serving(sock, third).close()
    finally:
        third.send_signal(signal.SIGTERM)
        third.wait(timeout=15)
