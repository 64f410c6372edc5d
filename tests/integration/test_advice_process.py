"""The daemon's advice is served by a child process of its own (server/advice_process.py): pricing
advice holds an interpreter, and in the daemon's own one it put slurmctld's Predict calls past the
plugin's 50 ms deadline (benchmarks/bench_advice_load.py). The child answers as the daemon did,
takes a reload's settings, is started again when it dies, and ends with the daemon, however the
daemon ends. Before, the advice socket's peer was the daemon's own process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.config import load
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.peer_relay import peer_credentials
from tests.integration.as_user import channel_as, connect_as
from tests.integration.test_advice_socket import NOBODY, ROOT, advise, ask, relay_dir, site, workdir

__all__ = ["site", "workdir"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs callers as two real users: root only")


def server_pid(sock: Path) -> int:
    """The pid of the process listening on ``sock``, as the kernel tells a client (SO_PEERCRED)."""
    conn = connect_as(ROOT, sock)
    try:
        return peer_credentials(conn).pid
    finally:
        conn.close()


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])  # after the name: state, then ppid


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (reaped, or a zombie its new parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def within(seconds: float, done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_advice_is_answered_by_a_child_of_the_daemon(site: tuple[Daemon, Path]) -> None:
    _, work = site
    child = server_pid(work / "advice.sock")
    assert child != os.getpid() and parent_of(child) == os.getpid()  # before: the daemon's own pid
    with channel_as(NOBODY.pw_uid, work / "advice.sock") as channel:
        theirs = advise(channel, ask())
    assert theirs.user_name == "nobody" and theirs.evidence == "1 run at 4 CPUs, 1 at 8 CPUs"
    # It holds none of the daemon's sockets: the submission socket's listener is not among its fds.
    predict = listeners(work / "harp.sock")
    held = {os.readlink(f"/proc/{child}/fd/{fd}") for fd in os.listdir(f"/proc/{child}/fd")}
    assert predict and not predict & held


def listeners(sock: Path) -> set[str]:
    """The sockets bound at ``sock``, as /proc/PID/fd names them ("socket:[inode]")."""
    rows = [line.split() for line in Path("/proc/net/unix").read_text().splitlines()[1:]]
    return {f"socket:[{row[6]}]" for row in rows if len(row) > 7 and row[7] == str(sock)}


def test_a_reload_reaches_the_advice(workdir: Path) -> None:
    conf = workdir / "harp.toml"
    base = (
        f'[server]\nsocket = "{workdir / "harp.sock"}"\n[store]\npath = "{workdir / "store"}"\n'
        f'[history]\ndb = "{workdir / "jobs.sqlite"}"\n[advice]\nsocket = "{workdir / "advice.sock"}"\n'
    )
    conf.write_text(base + '[billing]\ncurrency = "core-hours"\n')
    daemon = Daemon(load(conf), CollectorRegistry())
    daemon.start()
    try:
        with channel_as(ROOT, workdir / "advice.sock") as channel:
            assert advise(channel, ask()).currency == "core-hours"
            conf.write_text(base + '[billing]\ncurrency = "euros"\n')
            daemon.reload()  # SIGHUP's
            within(
                10, lambda: advise(channel, ask()).currency == "euros", "the reload did not reach the advice"
            )
    finally:
        daemon.stop(0)


def test_a_killed_advice_process_is_logged_and_replaced(
    site: tuple[Daemon, Path], caplog: pytest.LogCaptureFixture
) -> None:
    daemon, work = site
    first = server_pid(work / "advice.sock")
    assert first != os.getpid()  # before: this very process's
    os.kill(first, signal.SIGKILL)

    def replaced() -> bool:  # as harp serve's loop checks the socket, every few seconds
        daemon.check_socket()
        try:
            return server_pid(work / "advice.sock") != first
        except OSError:  # the dead one's socket, which nobody answers on yet
            return False

    with caplog.at_level(logging.ERROR, logger="slurm_harp.server.advice_process"):
        within(10, replaced, "no new advice process")
    said = [r.getMessage() for r in caplog.records if r.name == "slurm_harp.server.advice_process"]
    assert said == [f"the advice process {first} was killed by SIGKILL: starting a new one"]
    second = server_pid(work / "advice.sock")
    assert second != first and parent_of(second) == os.getpid()
    with channel_as(ROOT, work / "advice.sock") as channel:
        assert advise(channel, ask()).user_name == "root"
    relay_dir(work)  # one: the dead one's removed
    caplog.clear()
    daemon.check_socket()  # a live child: nothing said
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_daemons_stop_ends_its_advice_process(site: tuple[Daemon, Path]) -> None:
    daemon, work = site
    child = server_pid(work / "advice.sock")
    daemon.stop(0)
    assert gone(child)  # reaped: no process left behind
    assert not (work / "advice.sock").exists() and not list(work.glob(".harp-advice-*"))


def test_the_advice_process_ends_when_the_daemon_is_killed(workdir: Path) -> None:
    conf = workdir / "harp.toml"
    conf.write_text(
        f'[server]\nsocket = "{workdir / "harp.sock"}"\n[store]\npath = "{workdir / "store"}"\n'
        f'[history]\ndb = "{workdir / "jobs.sqlite"}"\n[advice]\nsocket = "{workdir / "advice.sock"}"\n'
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "slurm_harp.cli", "serve", "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        within(30, (workdir / "advice.sock").exists, "harp serve did not serve advice")
        child = server_pid(workdir / "advice.sock")
        assert parent_of(child) == serve.pid
        serve.kill()  # SIGKILL: the daemon cannot stop it
        serve.wait()
        within(5, lambda: gone(child), "the advice process outlived the daemon")
        assert not (workdir / "advice.sock").exists()  # it stopped as it does when asked
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert serve.stderr is not None
    log = serve.stderr.read()  # its child's lines come on the same stream, in the same format
    assert " WARNING slurm_harp.server.advice_child: advice process: the daemon is gone; stopping" in log
