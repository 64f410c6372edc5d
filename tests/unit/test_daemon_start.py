"""What `Daemon.start` refuses before it serves: a socket directory someone else could write in, a
socket path swapped for a link before its chmod, an address that cannot be bound. Each is a
DaemonError naming the path or the key, and leaves no socket behind."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.config import parse
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.socket_path import DaemonError, claim_socket, make_socket_dir

NOBODY = 65534


@pytest.fixture(scope="module", autouse=True)
def grpc_core_kept() -> Iterator[None]:
    """grpc core initialised for the module, as tests/integration/conftest.py says why."""
    keeper = grpc.insecure_channel("unix:/nonexistent/harp-tests-keep-grpc-core")
    yield
    keeper.close()


def make_daemon(sock: Path, tmp_path: Path, **server: Any) -> Daemon:
    settings = parse({"server": {"socket": str(sock), **server}, "store": {"path": str(tmp_path / "models")}})
    return Daemon(settings, CollectorRegistry())


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another process listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        yield listener.getsockname()[1]


def test_a_socket_directory_made_here_or_private_is_accepted(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        make_socket_dir(tmp_path / "new" / "run")  # mkdir -p under umask 0: 0755 all the same
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "run").stat().st_mode) == 0o755
    (tmp_path / "sticky").mkdir(mode=0o1777)
    os.chmod(tmp_path / "sticky", 0o1777)  # as /tmp: others may write, not rename ours
    make_socket_dir(tmp_path / "sticky")
    make_socket_dir(tmp_path)  # pytest's own: 0700
    (tmp_path / "var-run").symlink_to(tmp_path / "new")  # ours, as /var/run -> /run is root's
    make_socket_dir(tmp_path / "var-run" / "run")


def open_to_others(tmp_path: Path) -> tuple[Path, Path]:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    return shared, shared


def open_parent(tmp_path: Path) -> tuple[Path, Path]:
    os.chmod(tmp_path, 0o775)
    (tmp_path / "run").mkdir(mode=0o755)
    return tmp_path / "run", tmp_path


def a_link_to_an_open_directory(tmp_path: Path) -> tuple[Path, Path]:
    shared, _ = open_to_others(tmp_path)
    (tmp_path / "link").symlink_to(shared)
    return tmp_path / "link" / "run", shared


def anothers(tmp_path: Path) -> tuple[Path, Path]:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    (tmp_path / "theirs").mkdir(mode=0o755)
    os.chown(tmp_path / "theirs", NOBODY, NOBODY)
    return tmp_path / "theirs", tmp_path / "theirs"


def anothers_link(tmp_path: Path) -> tuple[Path, Path]:
    if os.geteuid() != 0:
        pytest.skip("giving a link to another user needs root")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    os.lchown(tmp_path / "link", NOBODY, NOBODY)
    return tmp_path / "link" / "run", tmp_path / "link"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (open_to_others, "writable by group or others (mode 0777) and not sticky"),
        (open_parent, "writable by group or others (mode 0775) and not sticky"),
        (a_link_to_an_open_directory, "writable by group or others (mode 0777) and not sticky"),
        (anothers, f"a directory owned by uid {NOBODY}, neither root nor this daemon's user"),
        (anothers_link, f"a symbolic link owned by uid {NOBODY}, neither root nor this daemon's user"),
    ],
    ids=["world-writable", "a-group-writable-parent", "a-link-to-one", "another-users", "another-users-link"],
)
def test_a_socket_directory_others_could_write_in_is_refused_naming_it(
    tmp_path: Path, make: Any, problem: str
) -> None:
    """Before, a directory that was there already was taken as it was: another user could rename
    the daemon's socket away and serve submissions their own answers at its path."""
    directory, culprit = make(tmp_path)
    daemon = make_daemon(directory / "harp.sock", tmp_path)
    try:
        with pytest.raises(DaemonError) as err:
            daemon.start()
    finally:
        daemon.stop(0)
    assert str(err.value).startswith(f"socket directory {directory}")
    assert f"{culprit} is {problem}" in str(err.value)
    assert not os.path.lexists(directory / "harp.sock")


def test_a_socket_swapped_for_a_link_before_its_chmod_changes_nothing_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chmod follows links: a socket path replaced by a link between the bind and the chmod gave
    the link's target the socket's mode. Now the path is checked to be our socket first."""
    sock = tmp_path / "harp.sock"
    victim = tmp_path / "victim"
    victim.write_text("")
    os.chmod(victim, 0o600)
    bind = Daemon._start_server

    def swapped_after_bind(self: Daemon, *address: str) -> grpc.Server:
        server = bind(self, *address)
        sock.unlink()
        sock.symlink_to(victim)
        return server

    monkeypatch.setattr(Daemon, "_start_server", swapped_after_bind)
    daemon = make_daemon(sock, tmp_path)
    try:
        with pytest.raises(DaemonError, match=f"{sock} is no longer the socket this daemon bound"):
            daemon.start()
    finally:
        daemon.stop(0)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("tcp", "127.0.0.1:{port}", "server.tcp: cannot listen on 127.0.0.1:{port} (its port in use"),
        ("metrics_port", "{port}", "server.metrics_port: cannot serve metrics on 127.0.0.1:{port}: Address"),
    ],
)
def test_an_address_that_cannot_be_bound_is_a_daemon_error_leaving_no_socket(
    tmp_path: Path, busy_port: int, key: str, value: str, said: str
) -> None:
    """Before: grpcio's RuntimeError or the metrics server's OSError, a traceback from `harp serve`,
    and the Unix socket left; then the socket's directory this start had made."""
    sock = tmp_path / "run" / "harp" / "harp.sock"
    setting = value.format(port=busy_port)
    daemon = make_daemon(sock, tmp_path, **{key: int(setting) if key == "metrics_port" else setting})
    try:
        with pytest.raises(DaemonError) as err:
            daemon.start()
    finally:
        daemon.stop(0)
    assert str(err.value).startswith(said.format(port=busy_port))
    assert not os.path.lexists(tmp_path / "run")


def no_such_host(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    """getaddrinfo says ``host`` does not resolve, as a resolver would, without asking one."""
    real = socket.getaddrinfo

    def getaddrinfo(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == host:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("nosuch.example", "Name or service not known"),
        ("192.0.2.1", "Cannot assign requested address"),
        ("fe80::1", "Invalid argument"),  # a link-local address names its interface: fe80::1%eth0
    ],
    ids=["unresolved", "not this host's", "link-local without its interface"],
)
def test_a_metrics_address_that_cannot_be_bound_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, address: str, problem: str
) -> None:
    """The address was at fault and the error named server.metrics_port."""
    no_such_host(monkeypatch, "nosuch.example")
    sock = tmp_path / "run" / "harp.sock"
    daemon = make_daemon(sock, tmp_path, metrics_address=address, metrics_port=19817)
    try:
        with pytest.raises(DaemonError) as err:
            daemon.start()
    finally:
        daemon.stop(0)
    assert str(err.value) == f"server.metrics_address: cannot serve metrics on {address}:19817: {problem}"


def claimed_as(uid: int, sock: Path) -> str:
    """What claim_socket(sock) does in a process of ``uid``: "claimed", or the exception it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no logging, no locks; always _exit
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            try:
                claim_socket(sock)
                said = "claimed"
            except Exception as exc:
                said = f"{type(exc).__name__}: {exc}"
            os.write(write, said.encode()[:4000])
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as out:
            said = out.read().decode()
    finally:
        os.waitpid(pid, 0)
    return said


@pytest.fixture
def shared() -> Iterator[Path]:
    """A sticky directory anyone may write in, as /tmp, that a user other than root can reach
    (pytest's own temporary directories are root's, 0700)."""
    directory = Path(tempfile.mkdtemp(prefix="harp-sticky-", dir="/tmp"))
    directory.chmod(0o1777)
    yield directory
    shutil.rmtree(directory)


def anothers_stale_socket(sock: Path) -> None:
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sock))
    stale.close()
    os.chmod(sock, 0o777)  # anyone may connect: the connection is refused, nobody listens
    os.chown(sock, NOBODY, NOBODY)


def anothers_dangling_link(sock: Path) -> None:
    sock.symlink_to(sock.parent / "gone")
    os.lchown(sock, NOBODY, NOBODY)


@pytest.mark.skipif(os.geteuid() != 0, reason="leaves a file of another user, and claims as a third")
@pytest.mark.parametrize("leave", [anothers_stale_socket, anothers_dangling_link], ids=["socket", "link"])
def test_a_stale_path_of_another_user_in_a_sticky_directory_is_a_daemon_error(
    shared: Path, leave: Any
) -> None:
    """A sticky directory (/tmp) is a socket directory check_socket_dir takes; another user's stale
    socket or dangling link at the path made unlink raise PermissionError, a traceback at start
    where `harp serve` says one line and exits 1."""
    sock = shared / "harp.sock"
    leave(sock)
    said = claimed_as(1, sock)  # uid 1 (daemon): neither root nor the path's owner
    assert said.startswith(f"DaemonError: {sock} is a stale socket or link nobody serves on, and this daemon "
                           "cannot remove it (Operation not permitted)"), said  # fmt: skip
    assert os.path.lexists(sock)


@pytest.mark.skipif(os.geteuid() != 0, reason="claims as another user")
def test_a_socket_path_this_user_cannot_search_is_a_daemon_error(tmp_path: Path) -> None:
    """lstat's PermissionError was a traceback too (pytest's directories are root's, 0700)."""
    sock = tmp_path / "harp.sock"
    assert claimed_as(1, sock) == f"DaemonError: {sock}: cannot check what is there (Permission denied)"
