"""The advice socket's start failures: a DaemonError naming the path, and nothing left behind (no
socket, no relay directory), whatever failed. Before, grpcio's RuntimeError and the relay's OSError
were tracebacks leaving the relay's `.harp-advice-*` directory and the submission socket.

The advice process runs serve_advice: the relay's failures are made here in serve_advice, in this
process; the daemon's own part (nothing of its left behind) with its advice process's start failing."""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.config import Settings, parse
from slurm_harp.server import advice_socket, listeners
from slurm_harp.server.advice_process import AdviceProcess
from slurm_harp.server.advice_socket import serve_advice
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.peer_relay import PeerRelay
from slurm_harp.server.socket_path import (
    SUN_PATH_MAX,
    DaemonError,
    inner_socket,
    make_socket_dir,
    remove_socket_dirs,
)


@pytest.fixture(scope="module", autouse=True)
def grpc_core_kept() -> Iterator[None]:
    """grpc core initialised for the module, as tests/integration/conftest.py says why."""
    keeper = grpc.insecure_channel("unix:/nonexistent/harp-tests-keep-grpc-core")
    yield
    keeper.close()


def settings_of(tmp_path: Path, advice: Path, sock: Path | None = None) -> Settings:
    return parse(
        {
            "server": {"socket": str(sock or tmp_path / "harp.sock")},
            "store": {"path": str(tmp_path / "models")},
            "advice": {"socket": str(advice)},
        }
    )


def started(tmp_path: Path, advice: Path, sock: Path | None = None) -> Daemon:
    """A daemon with an advice socket whose start() failed; the error is the test's to check."""
    return Daemon(settings_of(tmp_path, advice, sock), CollectorRegistry())


def serve(tmp_path: Path, advice: Path) -> None:
    """The advice process's start, which fails; the error is the test's to check."""
    settings = settings_of(tmp_path, advice)
    serve_advice(advice, lambda: settings)


def left(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p.is_socket() or p.name.startswith(".harp-advice-")]


def test_a_relay_that_cannot_listen_is_a_daemon_error_leaving_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(relay: PeerRelay) -> None:
        raise OSError(errno.EADDRINUSE, "Address already in use")

    monkeypatch.setattr(PeerRelay, "start", fail)
    advice = tmp_path / "advice.sock"
    said = f"advice.socket: cannot listen on {advice}: Address already in use"
    with pytest.raises(DaemonError, match=re.escape(said)):
        serve(tmp_path, advice)
    assert left(tmp_path) == []


def test_a_relay_socket_grpcio_cannot_bind_is_a_daemon_error_leaving_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grpcio's own refusal (its "Failed to bind" RuntimeError), should the check before it pass."""
    monkeypatch.setattr(advice_socket, "path_problem", lambda public: None)
    short = tmp_path / "a" / "advice.sock"
    advice = tmp_path / ("a" * (2 + SUN_PATH_MAX - len(str(inner_socket(short))))) / "advice.sock"
    with pytest.raises(DaemonError, match=r"advice\.socket: the relay's gRPC server cannot listen on "):
        serve(tmp_path, advice)
    assert left(tmp_path) == []


def test_an_unforeseen_error_at_start_leaves_no_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a DaemonError: raised as it is, but the submission socket is not left behind (the next
    start would find it and have to tell a crashed daemon's from a live one's)."""

    def fail(*_: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(AdviceProcess, "start", fail)
    d = started(tmp_path, tmp_path / "advice.sock")
    with pytest.raises(ValueError, match="a bug"):
        d.start()
    assert left(tmp_path) == []


def test_the_directories_a_failed_advice_start_made_are_removed(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only those it made: the one that was there is kept. Before, each start under Restart=always
    left the directories it had made."""

    def fail(relay: PeerRelay) -> None:
        raise OSError(errno.EADDRINUSE, "Address already in use")

    monkeypatch.setattr(PeerRelay, "start", fail)
    (short_tmp / "t").mkdir()
    with pytest.raises(DaemonError, match="cannot listen on"):
        serve(short_tmp, short_tmp / "t" / "m" / "d" / "advice.sock")
    assert [p.name for p in short_tmp.rglob("*")] == ["t"]


def test_the_directories_a_failed_submission_socket_start_made_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_: object) -> tuple[int, int]:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(listeners, "secure_socket", fail)
    d = started(tmp_path, tmp_path / "advice.sock", sock=tmp_path / "made" / "deeper" / "harp.sock")
    with pytest.raises(DaemonError, match=r"cannot give .* its group and mode"):
        d.start()
    assert list(tmp_path.rglob("*")) == []


def test_a_directory_made_and_no_longer_empty_is_kept_with_those_above(tmp_path: Path) -> None:
    made = make_socket_dir(tmp_path / "a" / "b" / "c")
    assert made == [tmp_path / "a" / "b" / "c", tmp_path / "a" / "b", tmp_path / "a"]
    (tmp_path / "a" / "b" / "someone's").write_text("x")
    remove_socket_dirs(made)
    assert not (tmp_path / "a" / "b" / "c").exists() and (tmp_path / "a" / "b" / "someone's").exists()


def test_the_advice_process_s_error_is_the_daemon_s_leaving_nothing(short_tmp: Path) -> None:
    """The advice is served by a child process: its start's DaemonError, word for word, is the
    daemon's, and the submission socket is not left behind."""
    (short_tmp / "file").write_text("")
    d = started(short_tmp, short_tmp / "file" / "advice.sock")
    said = f"socket directory {short_tmp / 'file'}: cannot make it: a file on its path"
    with pytest.raises(DaemonError, match=re.escape(said)):
        d.start()
    assert left(short_tmp) == []
