"""The daemon's listeners: the gRPC server on the submission socket (and server.tcp), bound with
its group and mode, and the Prometheus endpoint. Each fails as a DaemonError naming the setting."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from slurm_harp.config import ConfigError, ServerSettings, Settings, socket_gid
from slurm_harp.server.metrics_http import MetricsServer, bind_problem
from slurm_harp.server.service import PREDICT, SERVICE, PredictorService
from slurm_harp.server.socket_path import (
    DaemonError,
    claim_socket,
    make_socket_dir,
    remove_socket_dirs,
    secure_socket,
    umask_at_least,
)
from slurm_harp.server.unary_lane import UnaryLane

# How long past its grace a server's stop is waited for. grpcio's stop(grace) cuts off the calls still
# open at the grace, but completes only once every connection has taken what was written to it: a
# client that stops reading its answers (300 Predict calls on one connection are enough) held the
# stop, in the lane as in the pool, for as long as it kept the connection open (for ever, in the
# audit). Past this the server is given up: harp serve removes the socket and exits.
STOP_MARGIN_S = 3.0
# Why grpcio may not bind an address of each key (it says only "Failed to bind").
UNBOUND = {
    "server.tcp": "its port in use, or its host not one of this machine's",
    "server.socket": "its directory not writable by this user, or a path over 107 bytes",
}


def grpc_server(
    address: str,
    key: str,
    cfg: ServerSettings,
    service: PredictorService,
    health_servicer: health.HealthServicer,
) -> grpc.Server:
    """A started gRPC server on ``address``: Predict (in the lane unless configured off), health
    and reflection. DaemonError naming ``key`` (the setting) when it cannot bind."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="harp-rpc"),
        options=[("grpc.so_reuseport", 0)],
    )
    lane = UnaryLane.attach(server, PREDICT, service.answer, service.count) if cfg.predict_lane else None
    # Registered in both: grpc core routes Predict to the lane when it has one.
    server.add_generic_rpc_handlers((service.handler(),))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0  # grpcio raises where its older releases returned 0
    if not bound:
        raise DaemonError(f"{key}: cannot listen on {address} ({UNBOUND[key]})")
    server.start()
    if lane is not None:
        lane.start()
    return server


def unix_server(
    sock: Path, settings: Settings, start: Callable[[str, str], grpc.Server]
) -> tuple[grpc.Server, tuple[int, int], list[Path]]:
    """The server ``start`` binds on ``sock`` with its configured group and mode, the socket's
    (st_dev, st_ino) and the directories made for it (for the caller to remove should its start fail
    later); or DaemonError, leaving no socket nor a directory made for it. grpcio creates
    the socket 0777 less the umask, which SlurmUser's group may not connect to. It binds under a
    umask of 077, so that until its mode is set no one else can connect (with a umask of 0 anyone
    could, and a connection made then stays open after the chmod)."""
    try:
        gid = socket_gid(settings)  # first: a group gone since start binds nothing
    except ConfigError as exc:
        raise DaemonError(str(exc)) from None
    made = make_socket_dir(sock.parent)
    try:
        claim_socket(sock)
        with umask_at_least(0o077):
            server = start(f"unix:{sock}", "server.socket")
        return server, _secured(server, sock, gid, settings.server.socket_mode), made
    except BaseException:
        remove_socket_dirs(made)  # what this start made, now empty again
        raise


def _secured(server: grpc.Server, sock: Path, gid: int | None, mode: int) -> tuple[int, int]:
    """secure_socket's (st_dev, st_ino) of ``sock``; or DaemonError, ``server`` stopped and the
    socket removed."""
    try:
        return secure_socket(sock, gid, mode)
    except (OSError, DaemonError) as exc:
        server.stop(0).wait(STOP_MARGIN_S)  # grpcio unlinks the path as it stops
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        if isinstance(exc, DaemonError):
            raise
        raise DaemonError(f"cannot give {sock} its group and mode: {exc}") from None


def metrics_server(address: str, port: int, registry: CollectorRegistry) -> MetricsServer:
    """The Prometheus endpoint (metrics_http: bounded), or DaemonError naming the key and the address."""
    try:
        return MetricsServer(address, port, registry)
    except OSError as exc:
        raise DaemonError(bind_problem("server", address, port, exc)) from None
