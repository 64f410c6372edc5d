"""The advice process's faults (server/advice_process.py): a module planted in the directory
`harp serve` starts from, a child killed by a signal with no name, a stop signal while it starts, a
child dead before the daemon's stop or frozen (SIGSTOP), the daemon gone while it starts, a
relay's directory just made, a channel past descriptor 1023. Before,
the first ran the planted code as the daemon's user, the second raised at every socket check (and
a removed submission socket was never bound again), the third killed the child (`harp serve` exited
1), the next left the advice socket and the relay's directory behind or hung the daemon's loop."""

from __future__ import annotations

import logging
import os
import re
import resource
import signal
import socket
import subprocess
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.server import advice_child, advice_process
from slurm_harp.server.advice_leftovers import remove_dead
from slurm_harp.server.daemon import Daemon
from tests.integration.as_user import channel_as
from tests.integration.test_advice_process import gone, parent_of, server_pid, within
from tests.integration.test_advice_socket import ROOT, advise, ask, relay_dir, settings_in, workdir

__all__ = ["workdir"]  # the fixture, imported for pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs callers as two real users: root only")
LOGGER = "slurm_harp.server.advice_process"


@pytest.fixture
def daemon(workdir: Path) -> Iterator[Daemon]:
    d = Daemon(settings_in(workdir), CollectorRegistry())
    try:
        yield d
    finally:
        d.stop(0)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def answers(work: Path) -> bool:
    with channel_as(ROOT, work / "advice.sock") as channel:
        return advise(channel, ask()).user_name == "root"


def replaced(daemon: Daemon, work: Path, first: int) -> bool:
    """As harp serve's loop checks the sockets, every few seconds: whether a new child serves."""
    daemon.check_socket()
    try:
        return server_pid(work / "advice.sock") != first
    except OSError:  # the dead one's socket, which nobody answers on yet
        return False


def advice_children() -> list[int]:
    """The advice processes this process started (and has not reaped)."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [pid for pid in pids if not gone(pid) and parent_of(pid) == os.getpid() and is_advice(pid)]


def reapable(pid: int) -> bool:
    """Whether this process's child ``pid`` has exited, every thread of it: its main thread is a
    zombie (``gone``) while grpcio's threads still end, and waitpid does not see it until then."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def is_advice(pid: int) -> bool:
    try:
        return advice_process.MODULE in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def test_a_module_in_the_working_directory_is_not_run(
    workdir: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m` puts the current directory first on sys.path: a shutil.py there ran in the child."""
    planted = workdir / "cwd"
    planted.mkdir()
    marker = workdir / "PWNED"
    (planted / "shutil.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError\n")
    monkeypatch.chdir(planted)
    daemon.start()
    assert not marker.exists() and answers(workdir)


def test_a_child_killed_by_a_real_time_signal_is_replaced_and_the_submission_socket_rebound(
    workdir: Path, daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    daemon.start()
    first = server_pid(workdir / "advice.sock")
    os.kill(first, signal.SIGRTMIN + 1)
    within(5, lambda: gone(first), "the child outlived its signal")
    (workdir / "harp.sock").unlink()  # a tmpfiles cleaner
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        within(10, lambda: replaced(daemon, workdir, first), "no new advice process")
    assert said(caplog) == [
        f"the advice process {first} was killed by signal {signal.SIGRTMIN + 1}: starting a new one"
    ]
    assert (workdir / "harp.sock").is_socket() and answers(workdir)
    second = server_pid(workdir / "advice.sock")  # dead within RESTART_EVERY_S: when is the next
    os.kill(second, signal.SIGKILL)
    within(5, lambda: reapable(second), "the child outlived SIGKILL")
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        daemon.check_socket()
    assert re.fullmatch(
        rf"the advice process {second} was killed by SIGKILL: starting a new one in \d+ s", said(caplog)[0]
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_while_the_child_starts_leaves_it_to_the_daemon(
    daemon: Daemon, workdir: Path, monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    """The unit's SIGTERM reaches the child too, maybe before it has its handlers: it was killed."""
    real = subprocess.Popen

    def signalled(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = real(*args, **kwargs)  # type: ignore[call-overload]
        os.kill(proc.pid, signum)  # at once: in its interpreter's start, long before main()
        return proc

    monkeypatch.setattr(subprocess, "Popen", signalled)  # the module advice_process runs it from
    daemon.start()
    child = server_pid(workdir / "advice.sock")
    assert answers(workdir)
    # Unblocked in the child once it has its handlers: the scontrol it runs inherits its mask.
    status = Path(f"/proc/{child}/status").read_text()
    (blocked,) = [int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigBlk:")]
    assert not blocked & sum(1 << (s - 1) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))


def test_a_child_dead_before_the_stop_is_said_and_cleared(
    workdir: Path, daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    daemon.start()
    child = server_pid(workdir / "advice.sock")
    os.kill(child, signal.SIGKILL)
    within(5, lambda: reapable(child), "the child outlived SIGKILL")
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        daemon.stop(0)
    assert said(caplog) == [f"the advice process {child} was killed by SIGKILL"]
    assert not (workdir / "advice.sock").exists() and not list(workdir.glob(".harp-advice-*"))


def test_a_killed_childs_directory_is_removed_at_the_next_start(workdir: Path, daemon: Daemon) -> None:
    left = workdir / ".harp-advice-deadbeef"
    left.mkdir(mode=0o700)  # a child killed (hung at a stop) left it, a minute ago
    os.utime(left, (left.stat().st_atime - 60, left.stat().st_mtime - 60))
    daemon.start()
    assert relay_dir(workdir).name != ".harp-advice-deadbeef"  # the one left: the new child's


def test_a_relay_directory_just_made_is_left_to_its_relay(workdir: Path) -> None:
    """Another daemon's relay, with its advice socket in the same directory, between its mkdtemp
    and the bind in it: a new directory with no socket was taken for a dead child's and removed,
    and that daemon's advice start failed."""
    fresh = workdir / ".harp-advice-justmade"
    fresh.mkdir(mode=0o700)
    remove_dead(workdir / "advice.sock")
    assert fresh.is_dir()


def test_a_channel_past_descriptor_1023_is_no_error(workdir: Path) -> None:
    """select() refuses a descriptor past 1023: reload, check and stop raised ValueError for a
    child started while the daemon held many descriptors (LimitNOFILE raised, many clients)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} holds no descriptor past 1100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    advice = advice_process.AdviceProcess()
    try:
        advice.start(settings_in(workdir))
        advice.update(settings_in(workdir))
        advice.check(settings_in(workdir))
        assert advice.stop(0.0, 2.0).wait(5.0)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_frozen_child_is_killed_and_replaced(
    workdir: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGSTOP: the checks sent to it filled the socketpair, and the daemon's loop blocked on the next."""
    monkeypatch.setattr(advice_process, "UNRESPONSIVE_S", 1.0, raising=False)  # before: none
    daemon.start()
    first = server_pid(workdir / "advice.sock")
    os.kill(first, signal.SIGSTOP)

    def replaced_frozen() -> bool:  # not asked on its socket: a frozen child's backlog fills up
        daemon.check_socket()
        return advice_children() not in ([], [first])

    with caplog.at_level(logging.ERROR, logger=LOGGER):
        within(15, replaced_frozen, "the frozen child was not replaced")
    assert said(caplog) == [f"the advice process {first} left a socket check unanswered for 1 s: killed"]
    assert gone(first) and answers(workdir)


def test_the_daemon_gone_before_the_child_answers_its_start(workdir: Path) -> None:
    """The child's ("ok", ...) cannot be sent: it stops its relay, leaving nothing behind."""
    ours, theirs = socket.socketpair()
    theirs.close()
    assert advice_child._serve(Connection(ours.detach()), settings_in(workdir)) == 0
    assert not (workdir / "advice.sock").exists() and not list(workdir.glob(".harp-advice-*"))
