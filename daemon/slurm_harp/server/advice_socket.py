"""The advice socket: any user may open it (mode 0666); the peer relay in front tells each call's
uid to a gRPC server of its own that serves Advisor alone (not Predictor: its answers would tell
one user's history to another)."""

from __future__ import annotations

import logging
import stat
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
from grpc_reflection.v1alpha import reflection

from slurm_harp.config import Settings
from slurm_harp.server.advice_service import ADVISOR, AdvisorService
from slurm_harp.server.advisor import Advisor
from slurm_harp.server.peer_relay import PeerRelay
from slurm_harp.server.socket_path import (
    DaemonError,
    claim_socket,
    make_socket_dir,
    path_problem,
    remove_socket_dirs,
)

log = logging.getLogger(__name__)
# Advice calls computed at once. They share the advice process's interpreter (advice_process.py), not
# the daemon's: Predict no longer waits for them.
ADVICE_WORKERS = 2
ADVICE_REQUEST_BYTES = 256 * 1024  # a job's fields and 64 partition names, each cut to 1 KiB


def serve_advice(sock: Path, settings: Callable[[], Settings]) -> tuple[grpc.Server, PeerRelay]:
    """The started server and relay of the advice socket ``sock``; ``settings`` gives the ones
    in force (a reload changes them). DaemonError when the path is not the daemon's to take or
    cannot be listened at; then nothing is left bound, nor the relay's private directory,
    nor a directory made for the socket."""
    problem = path_problem(sock)
    if problem is not None:
        raise DaemonError(f"advice.socket: {problem}")
    made = make_socket_dir(sock.parent)
    try:
        server, relay = _serve_relay(sock, settings)
    except BaseException:
        remove_socket_dirs(made)  # what this start made, now empty again
        raise
    log.info("advice for users on unix:%s (any user; each answered from their own jobs)", sock)
    closed = [p for p in (sock.parent, *sock.parent.parents) if not p.stat().st_mode & stat.S_IXOTH]
    if closed:
        log.warning("users cannot reach %s: %s is not searchable by others (o+x)", sock, closed[0])
    return server, relay


def _serve_relay(sock: Path, settings: Callable[[], Settings]) -> tuple[grpc.Server, PeerRelay]:
    """The started server and relay on ``sock``, its directory there; or DaemonError, nothing left
    bound, nor the relay's private directory."""
    claim_socket(sock)
    relay = PeerRelay(sock, max_connections=settings().advice.max_connections)
    try:
        server = _serve_inner(relay, settings)
    except BaseException:
        relay.stop()  # removes its private directory
        raise
    try:
        relay.start()
    except BaseException as exc:
        server.stop(0).wait()  # the caller has no server to stop yet
        relay.stop()
        if isinstance(exc, OSError):
            raise DaemonError(f"advice.socket: cannot listen on {sock}: {exc.strerror or exc}") from None
        raise
    return server, relay


def _serve_inner(relay: PeerRelay, settings: Callable[[], Settings]) -> grpc.Server:
    """The started Advisor server on the relay's inner socket; DaemonError when it cannot bind."""
    # grpcio gives a call its pool thread when the call's headers arrive, and the thread waits
    # there for the request: one connection's unfinished calls held every thread of a small
    # pool, and no other user was answered. One call per connection (the relay caps each uid's
    # connections), a thread for each, and ADVICE_WORKERS computing at once (AdvisorService).
    calls = relay.max_connections
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=calls, thread_name_prefix="harp-advice"),
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_concurrent_streams", 1),
            ("grpc.max_receive_message_length", ADVICE_REQUEST_BYTES),
        ],
        maximum_concurrent_rpcs=calls,
    )
    service = AdvisorService(Advisor(settings), relay.peer, ADVICE_WORKERS)
    server.add_generic_rpc_handlers((service.handler(),))
    reflection.enable_server_reflection((ADVISOR, reflection.SERVICE_NAME), server)
    try:
        bound = server.add_insecure_port(f"unix:{relay.inner}")
    except RuntimeError:
        bound = 0  # grpcio raises where its older releases returned 0
    if not bound:
        raise DaemonError(f"advice.socket: the relay's gRPC server cannot listen on {relay.inner}")
    server.start()
    return server
