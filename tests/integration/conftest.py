"""Fixtures of the conformance modules of the plugin's Lua gRPC client (test_lua_grpc_*.py).

A socket path, a grpcio server of conf.Test answering in its worker pool or in core lanes (``lane``),
a scripted HTTP/2 peer on that socket, and the Lua driver on it. test_lua_grpc.py uses this socket
and this driver with a server fixture of its own, which takes precedence in that module.

A test that stops a grpcio server waits for it (``stop(0).wait()``): otherwise the server is still
being torn down while the next test starts one. If a run dies with "Fatal Python error: Aborted"
(a CHECK in grpc core), rerun it with ``--capture=sys`` (or ``-s``): grpc core writes its reason to
file descriptor 2, which pytest's default capture loses when the process dies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from tests.integration.conformance_service import Recorder, start_conformance_server
from tests.integration.h2_peer import PeerConn, ScriptedPeer
from tests.integration.lua_driver import Driver


@pytest.fixture(scope="session", autouse=True)
def grpc_core_kept() -> Iterator[None]:
    """grpc core initialised for the whole run, as in a daemon that serves for its whole life.
    Each test's last server would otherwise shut core down (grpc_shutdown) and the next test's
    start it again, a cycle per test that production never goes through: the one abort seen in
    these tests came from a core thread after such a teardown, its reason lost (above). A channel
    holds core's initialisation and connects to nothing until used."""
    keeper = grpc.insecure_channel("unix:/nonexistent/harp-tests-keep-grpc-core")
    yield
    keeper.close()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "conf.sock"


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture(params=[False, True], ids=["pool", "lane"])
def lane(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def server(sock: Path, rec: Recorder, lane: bool) -> Iterator[grpc.Server]:
    srv = start_conformance_server(sock, rec, lane)
    yield srv
    srv.stop(0).wait()


@pytest.fixture
def pool_server(sock: Path, rec: Recorder) -> Iterator[grpc.Server]:
    srv = start_conformance_server(sock, rec)
    yield srv
    srv.stop(0).wait()


@pytest.fixture
def driver(sock: Path) -> Iterator[Driver]:
    drv = Driver(sock)
    yield drv
    drv.close()


@pytest.fixture
def peer_at(sock: Path) -> Iterator[Callable[[Callable[[PeerConn], None]], ScriptedPeer]]:
    peers: list[ScriptedPeer] = []

    def make(script: Callable[[PeerConn], None]) -> ScriptedPeer:
        peers.append(ScriptedPeer(sock, script))
        return peers[-1]

    yield make
    for p in peers:
        p.close()
    for p in peers:
        assert not p.errors, p.errors
