"""`server.tcp`'s host as grpcio binds it (config/endpoints.py server_tcp): what check-config reads,
grpcio binds, and what grpcio cannot bind check-config refuses, naming the key."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from slurm_harp.config import parse
from tests.unit.test_config import refused_by_check_config

# Addresses check-config said ok to, for which `harp serve` then exited 1 with "cannot listen on
# ::1:50062 (its port in use, or its host not one of this machine's)": grpcio looked each host up
# as a name and found none.
UNBINDABLE = {
    "::1:50062": "server.tcp: an IPv6 address must be in brackets: write [::1]:50062, got '::1:50062'",
    "127.0.0.1 :50066": "server.tcp: must be host:port without spaces, got '127.0.0.1 :50066'",
    "a b:5": "server.tcp: must be host:port without spaces, got 'a b:5'",
    "[127.0.0.1]:50051": (
        "server.tcp: brackets are for an IPv6 address alone, as in [::1]:50051, got '[127.0.0.1]:50051'"
    ),
    "[localhost]:50051": "server.tcp: brackets are for an IPv6 address alone",
    "[::1]x:50051": "server.tcp: brackets are for an IPv6 address alone",
    "ipv4:127.0.0.1:50051": (
        "server.tcp: expected host:port with a host name, an IPv4 address or an IPv6 address in brackets "
        "([::1]:50051), got 'ipv4:127.0.0.1:50051'"
    ),
}


def _grpcio_binds(address: str) -> bool:
    server = grpc.server(ThreadPoolExecutor(1))
    try:
        return server.add_insecure_port(address) > 0
    except RuntimeError:  # "Failed to bind to address ..."
        return False
    finally:
        server.stop(0)


def _free_port(family: socket.AddressFamily = socket.AF_INET) -> int:
    with socket.socket(family) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("tcp", UNBINDABLE)
def test_a_server_tcp_grpcio_cannot_bind_is_refused_by_check_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, tcp: str
) -> None:
    path, line = refused_by_check_config(tmp_path, caplog, f"[server]\ntcp = '{tcp}'\n")
    assert line.startswith(f"{path}: {UNBINDABLE[tcp]}"), line
    port = _free_port()
    assert not _grpcio_binds(tcp.rpartition(":")[0] + f":{port}")  # what serve was left to find out


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "LOCALHOST", "0.0.0.0", "[::1]", "[::]", "[::ffff:127.0.0.1]"]
)
def test_the_hosts_grpcio_binds_are_read(host: str) -> None:
    port = _free_port(socket.AF_INET6 if host.startswith("[") else socket.AF_INET)
    tcp = f"{host}:{port}"
    assert parse({"server": {"tcp": tcp}}).server.tcp == tcp
    assert _grpcio_binds(tcp)
