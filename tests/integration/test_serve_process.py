"""`harp serve` as a real process: start, answer, SIGHUP reload, SIGTERM drain."""

from __future__ import annotations

import contextlib
import grp
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.conftest import not_a_file
from tests.integration.harp_client import Client, target
from tests.integration.test_daemon import promote_a_copy


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


def start_serve(conf: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )


@contextlib.contextmanager
def serving(conf: Path) -> Iterator[subprocess.Popen[str]]:
    """`harp serve` on ``conf`` for the block; killed after it if the test left it running."""
    proc = start_serve(conf)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_reload_and_terminate(tmp_path: Path, trained_store: Path) -> None:
    sock = tmp_path / "run" / "harp.sock"
    conf = tmp_path / "harp.toml"
    base = f'[server]\nsocket = "{sock}"\nstore_poll_seconds = 3600\n[store]\npath = "{trained_store}"\n'
    conf.write_text(base + '[policy]\nmode = "shadow"\n')
    with serving(conf) as proc:
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
    assert not sock.exists()
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "SIGHUP: reloading" in log and "stopped" in log


def test_a_promoted_model_is_served_within_store_poll_seconds_without_a_signal(
    tmp_path: Path, store_copy: Path
) -> None:
    """docs/install.md: after `harp rollback` (or a promotion) the daemon serves the version CURRENT
    names within `server.store_poll_seconds`, with no SIGHUP."""
    sock = tmp_path / "harp.sock"
    conf = tmp_path / "harp.toml"
    conf.write_text(f'[server]\nsocket = "{sock}"\nstore_poll_seconds = 1\n[store]\npath = "{store_copy}"\n')
    with serving(conf) as proc:
        client = wait_serving(sock, proc)
        version = target(client.predict(time_limit_minutes=600), "time").model_version
        current, newer = promote_a_copy(store_copy)
        assert version == current.name
        promoted = time.monotonic()
        while target(client.predict(time_limit_minutes=600), "time").model_version != newer.name:
            assert time.monotonic() - promoted < 10, "the promoted version is not served"
            time.sleep(0.05)
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert proc.stderr is not None
    log = proc.stderr.read()
    assert "model store changed; reloading" in log and "SIGHUP" not in log


def serve_to_exit(conf: Path) -> subprocess.CompletedProcess[str]:
    """`harp serve --config conf` run to its exit (a config it refuses), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_bad_config_exits_with_a_message(tmp_path: Path) -> None:
    conf = tmp_path / "harp.toml"
    conf.write_text("[policy]\nmod = 'shadow'\n")
    proc = serve_to_exit(conf)
    assert proc.returncode == 2
    assert f"{conf}: policy.mod: unknown key" in proc.stderr


@pytest.mark.parametrize("bad", ["latin-1", "FIFO", "directory"])
def test_an_unreadable_config_exits_2_naming_the_file(tmp_path: Path, bad: str) -> None:
    conf = tmp_path / "harp.toml"
    problem = _spoil(conf, bad)
    proc = serve_to_exit(conf)
    assert proc.returncode == 2
    assert f"{conf}: {problem}" in proc.stderr and "Traceback" not in proc.stderr


def test_an_unknown_socket_group_exits_2_before_binding(tmp_path: Path) -> None:
    sock = tmp_path / "harp.sock"
    conf = tmp_path / "harp.toml"
    conf.write_text(f'[server]\nsocket = "{sock}"\nsocket_group = "nosuchgroup-harp"\n')
    proc = serve_to_exit(conf)
    assert proc.returncode == 2
    assert f"{conf}: server.socket_group: no group 'nosuchgroup-harp' on this host" in proc.stderr
    assert "Traceback" not in proc.stderr and not sock.exists()


def _spoil(conf: Path, bad: str) -> str:
    """Make ``conf`` a file tomllib cannot read; the problem the daemon should name."""
    conf.unlink(missing_ok=True)
    if bad == "latin-1":
        conf.write_bytes("# site: Z\u00fcrich\n[policy]\nmode = 'off'\n".encode("latin-1"))
        return "not UTF-8 text: byte 0xfc at offset 9"
    return "cannot read: " + not_a_file(conf, bad)


class StderrLines:
    """A running process's stderr, read line by line in a thread, so a test can wait for a line."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self.lines: list[str] = []
        self._stream = proc.stderr
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_for(self, text: str, after: int = 0, timeout: float = 15) -> str:
        """The first line from line ``after`` on that holds ``text``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines[after:] if text in line), None)
            if found is not None:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no log line with {text!r} in:\n{''.join(self.lines)}")


def test_an_unreadable_config_on_sighup_keeps_the_running_one(tmp_path: Path, trained_store: Path) -> None:
    sock = tmp_path / "harp.sock"
    conf = tmp_path / "harp.toml"
    base = f'[server]\nsocket = "{sock}"\nstore_poll_seconds = 3600\n[store]\npath = "{trained_store}"\n'
    conf.write_text(base + '[policy]\nmode = "shadow"\n')
    with serving(conf) as proc:
        stderr = StderrLines(proc)
        client = wait_serving(sock, proc)
        for bad in ("latin-1", "FIFO", "directory"):
            problem, seen = _spoil(conf, bad), len(stderr.lines)
            proc.send_signal(signal.SIGHUP)
            line = stderr.wait_for("reload: keeping the previous configuration", after=seen)
            assert f"{conf}: {problem}" in line
            assert proc.poll() is None and client.predict(time_limit_minutes=600).mode == "shadow"
        conf.rmdir()  # a good file again: the next SIGHUP takes it
        conf.write_text(base + '[policy]\nmode = "off"\n')
        proc.send_signal(signal.SIGHUP)
        stderr.wait_for(f"reload: configuration re-read from {conf}", after=len(stderr.lines))
        assert client.predict(time_limit_minutes=600).mode == "off"
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert "Traceback" not in "".join(stderr.lines)


def test_a_second_daemon_refuses_a_live_socket_and_a_removed_one_comes_back(
    tmp_path: Path, trained_store: Path
) -> None:
    sock = tmp_path / "harp.sock"
    conf = tmp_path / "harp.toml"
    group = grp.getgrgid(65534 if os.geteuid() == 0 else os.getgid())  # root may give any group
    conf.write_text(
        f'[server]\nsocket = "{sock}"\nsocket_group = "{group.gr_name}"\nstore_poll_seconds = 3600\n'
        f'[store]\npath = "{trained_store}"\n'
    )
    with serving(conf) as first:
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
        assert sock.stat().st_gid == group.gr_gid
        client.close()
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=15) == 0
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
