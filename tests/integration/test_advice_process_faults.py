"""The advice process's faults (server/advice_process.py): a module planted in the directory
`harp serve` starts from, a child killed by a signal with no name, a stop signal while it starts, a
child dead before the daemon's stop or frozen (SIGSTOP), the daemon gone while it starts. Before,
the first ran the planted code as the daemon's user, the second raised at every socket check (and
a removed submission socket was never bound again), the third killed the child (`harp serve` exited
1), the next left the advice socket and the relay's directory behind or hung the daemon's loop."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.server.daemon import Daemon
from tests.integration.as_user import channel_as
from tests.integration.test_advice_process import server_pid
from tests.integration.test_advice_socket import ROOT, advise, ask, settings_in, workdir

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
