"""The prediction daemon's lifecycle: bind, load, serve, reload on SIGHUP, drain on shutdown."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry, start_http_server

from slurm_harp.config import ConfigError, Settings, load, socket_gid
from slurm_harp.config.start_only import daemon_part
from slurm_harp.core.features import vectorize
from slurm_harp.core.predictor import HistorySource, Predictor
from slurm_harp.core.request import Target
from slurm_harp.heartbeat import HeartbeatFile
from slurm_harp.model.store import ModelStore
from slurm_harp.server.advice_socket import serve_advice
from slurm_harp.server.history_feed import HistoryFeed
from slurm_harp.server.outcome_metrics import OutcomeMetrics
from slurm_harp.server.peer_relay import PeerRelay
from slurm_harp.server.reloader import reload_models, store_fingerprint
from slurm_harp.server.service import PREDICT, SERVICE, PredictorService
from slurm_harp.server.serving_metrics import ServingMetrics
from slurm_harp.server.socket_path import (
    DaemonError,
    claim_socket,
    make_socket_dir,
    secure_socket,
    umask_at_least,
)
from slurm_harp.server.unary_lane import UnaryLane

log = logging.getLogger(__name__)
SERVICE_NAME = SERVICE
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# How long start() waits for the job history to be seeded before serving anyway (users whose
# history is not loaded yet are cold: annotated, not rewritten).
HISTORY_SEED_WAIT_S = 60.0
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


class StuckServer(RuntimeError):
    """The server of a removed socket did not stop within its grace and STOP_MARGIN_S (a client not
    reading its answers holds it). Bound again beside it, its socket would be unlinked whenever it
    did stop (grpcio removes the path then); harp serve exits instead, non-zero, and systemd's
    Restart=always starts a daemon that binds the socket anew. The message says so."""


@functools.lru_cache(maxsize=4096)
def _owner(store: Path, version: str) -> Target | None:
    # Cached (versions are never renamed), by store too: a reload may change [store] path.
    return ModelStore(store).owner(version)


class Daemon:
    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry | None = None,
        history: HistorySource | None = None,
        settle: Callable[[], object] | None = None,
    ) -> None:
        """``history``: a history source instead of the store feed (a trace replay: harp demo).
        ``settle``: called after models load and as the history grows (``harp serve`` passes
        server.heap.settle, which keeps full garbage collections short)."""
        self.settings = settings
        self._settle = settle
        self.registry = registry or CollectorRegistry()
        self.metrics = ServingMetrics(self.registry)
        self.history = HistoryFeed(settings.history) if settings.history.db is not None else None
        if self.history is not None:
            self.history.settle = settle
            # Accuracy from the jobs that ran, read from the same job store as the history.
            self.history.outcomes = OutcomeMetrics(
                self.registry,
                self._version_owner,
                window_s=settings.history.outcome_window_days * 86400,
            )
        # Time_min and extend modes shorten jobs only while `harp guard` beats (core.predictor).
        heartbeat = HeartbeatFile(settings.guard.heartbeat, settings.guard.stale_seconds)
        self.predictor = Predictor(
            settings.policy, vectorize, history=history or self.history, guard=heartbeat
        )
        self.health = health.HealthServicer()
        self._unix: grpc.Server | None = None
        self._tcp: grpc.Server | None = None
        self._advice: grpc.Server | None = None
        self._metrics: WSGIServer | None = None
        self._relay: PeerRelay | None = None
        self._socket_id = (0, 0)  # (st_dev, st_ino) of the socket this daemon bound
        self._taken_over = False
        self._fingerprint: tuple[object, ...] = ()
        self._lock = threading.Lock()  # one reload at a time (SIGHUP and the store poller)

    def start(self) -> None:
        """Bind first (NOT_SERVING), then load models, then report SERVING. DaemonError when the
        socket cannot be taken (another daemon answers on it) or an address not bound; what was
        bound by then is closed, and no socket left behind."""
        cfg = self.settings.server
        self._set_health(NOT_SERVING)
        self._unix = self._serve_unix(cfg.socket)
        try:
            if cfg.tcp:  # a server of its own, so that the socket can be bound again alone
                self._tcp = self._start_server(cfg.tcp, "server.tcp")
            if cfg.metrics_port is not None:
                self._metrics = self._serve_metrics(cfg.metrics_address, cfg.metrics_port)
            log.info("listening on unix:%s%s", cfg.socket, f" and {cfg.tcp}" if cfg.tcp else "")
            if self.settings.advice.socket is not None:
                self._advice, self._relay = serve_advice(self.settings.advice.socket, lambda: self.settings)
        except DaemonError:
            self._unbind(0)
            raise
        self.reload_models()
        if self.history is None:
            log.info("no [history] db: history features are unknown (NaN) and no user counts as cold")
        else:
            self.history.start()
            if not self.history.seeded.wait(HISTORY_SEED_WAIT_S):
                log.warning("history: still seeding after %gs; serving meanwhile", HISTORY_SEED_WAIT_S)
        self._set_health(SERVING)

    def _start_server(self, address: str, key: str) -> grpc.Server:
        """A started gRPC server on ``address``: Predict (in the lane unless configured off),
        health and reflection. DaemonError naming ``key`` (the setting) when it cannot bind."""
        cfg = self.settings.server
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=cfg.max_workers, thread_name_prefix="harp-rpc"),
            options=[("grpc.so_reuseport", 0)],
        )
        service = PredictorService(self.predictor, self.metrics)
        lane = UnaryLane.attach(server, PREDICT, service.answer, service.count) if cfg.predict_lane else None
        # Registered in both: grpc core routes Predict to the lane when it has one.
        server.add_generic_rpc_handlers((service.handler(),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
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

    def _serve_unix(self, sock: Path) -> grpc.Server:
        """Bind ``sock`` with its configured group and mode, or raise DaemonError and leave no
        socket: grpcio creates it 0777 less the umask, which SlurmUser's group may not connect to. It
        binds under a umask of 077, so that until its mode is set no one else can connect (with a
        umask of 0 anyone could, and a connection made then stays open after the chmod)."""
        try:
            gid = socket_gid(self.settings)  # first: a group gone since start binds nothing
        except ConfigError as exc:
            raise DaemonError(str(exc)) from None
        make_socket_dir(sock.parent)
        claim_socket(sock)
        with umask_at_least(0o077):
            server = self._start_server(f"unix:{sock}", "server.socket")
        try:
            self._socket_id = secure_socket(sock, gid, self.settings.server.socket_mode)
        except (OSError, DaemonError) as exc:
            server.stop(0).wait(STOP_MARGIN_S)  # grpcio unlinks the path as it stops
            with contextlib.suppress(FileNotFoundError):
                sock.unlink()
            if isinstance(exc, DaemonError):
                raise
            raise DaemonError(f"cannot give {sock} its group and mode: {exc}") from None
        return server

    def _serve_metrics(self, address: str, port: int) -> WSGIServer:
        """The Prometheus endpoint, or DaemonError naming the key and the address."""
        try:
            server, _thread = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise DaemonError(
                f"server.metrics_port: cannot serve metrics on {address}:{port}: {exc.strerror or exc}"
            ) from None
        return server

    def check_socket(self) -> None:
        """Bind the socket again if something removed it (a tmpfiles cleaner, an rm): until then
        every submission fails open. A path taken over by something else is left alone."""
        if self._relay is not None:
            self._relay.check_socket()
        sock = self.settings.server.socket
        if self._socket_id == (0, 0):
            return  # not started
        try:
            st = sock.lstat()
        except FileNotFoundError:
            pass
        else:
            if (st.st_dev, st.st_ino) != self._socket_id and not self._taken_over:
                self._taken_over = True
                log.error(
                    "%s is no longer this daemon's socket; leaving it alone (restart to claim it)", sock
                )
            return
        log.warning("socket %s was removed; binding it again", sock)
        # grpcio unlinks a server's socket path when the server stops: stop the old one first.
        if self._unix is not None:
            grace = self.settings.server.grace_seconds
            stopped = self._unix.stop(grace).wait(grace + STOP_MARGIN_S)
            self._unix = None  # stopped, or given up: nothing more is asked of it
            if not stopped:
                raise StuckServer(
                    f"socket {sock} was removed, and the server that was on it did not stop within "
                    f"{grace + STOP_MARGIN_S:g} s (a client not reading its answers holds it): "
                    "exiting, so that a restart binds the socket again"
                )
        try:
            self._unix = self._serve_unix(sock)
        except (OSError, RuntimeError, DaemonError) as exc:
            log.error("cannot bind %s again (next try in a few seconds): %s", sock, exc)
            return
        self._taken_over = False

    def _set_health(self, status: int) -> None:
        for name in ("", SERVICE_NAME):
            self.health.set(name, status)

    def _version_owner(self, version: str) -> Target | None:
        """The target ``version`` belongs to in the store configured now."""
        return _owner(self.settings.store, version)

    def reload_models(self) -> tuple[str, ...]:
        """Load whatever the store now points at; returns the rejections (empty when all is well)."""
        with self._lock:
            # Read before loading: a CURRENT moved while the models load (a promotion, a rollback),
            # or a file of its version written meanwhile, then differs at the next poll.
            fingerprint = store_fingerprint(self.settings.store)
            result = reload_models(self.settings.store, self.predictor.models, self.metrics)
            self.predictor.swap(models=result.models)
            self._fingerprint = fingerprint
            if self._settle is not None:  # loading leaves the onnx package's objects behind
                self._settle()
            return result.rejected

    def reload(self) -> None:
        """SIGHUP: re-read the config file and the models. A bad config keeps the old one."""
        source = self.settings.source
        if source is not None:
            try:
                fresh = load(source)
            except ConfigError as exc:
                log.error("reload: keeping the previous configuration: %s", exc)
            except Exception:  # a reader's bug must not end the daemon that serves every job
                log.exception("reload: keeping the previous configuration: reading %s failed", source)
            else:
                kept = daemon_part(self.settings)  # config/start_only.py: until a restart
                for section, value in kept.items():
                    if getattr(fresh, section) != value:
                        log.warning("reload: [%s] changes take effect only after a restart", section)
                self.settings = replace(fresh, source=source, **kept)
                self.predictor.swap(policy=fresh.policy)
                log.info("reload: configuration re-read from %s", source)
        self.reload_models()

    def poll_store(self) -> None:
        """Pick up a promoted model without a signal (cheap: reads the CURRENT pointers and lists
        their versions' files). A version rejected is tried again once a file of it changes (a
        copy completed), its rejection logged once per state of its files."""
        if store_fingerprint(self.settings.store) != self._fingerprint:
            log.info("model store changed; reloading")
            self.reload_models()

    def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, let in-flight calls finish, then close and remove the socket."""
        self.health.enter_graceful_shutdown()
        self._unbind(self.settings.server.grace_seconds if grace is None else grace)
        if self.history is not None:
            self.history.stop()

    def _unbind(self, grace: float) -> None:
        """Close every listener, calls given ``grace`` seconds, and remove the socket (unless
        something else took its path over). A server not stopped STOP_MARGIN_S past the grace
        is logged and left as it is: the process is about to exit."""
        if self._relay is not None:  # no new advice connection; the open ones end
            self._relay.stop()
        cfg = self.settings
        servers = {
            f"unix:{cfg.server.socket}": self._unix,
            str(cfg.server.tcp): self._tcp,
            f"unix:{cfg.advice.socket}": self._advice,
        }
        stopping = {name: server.stop(grace) for name, server in servers.items() if server is not None}
        deadline = time.monotonic() + grace + STOP_MARGIN_S
        stuck = [
            name for name, done in stopping.items() if not done.wait(max(0.0, deadline - time.monotonic()))
        ]
        if stuck:
            log.error(
                "the server on %s did not stop within %g s past its %g s grace (a client not reading "
                "its answers holds a connection open): closing without it",
                " and ".join(stuck), STOP_MARGIN_S, grace,
            )  # fmt: skip
        if self._unix is not None and not self._taken_over:
            with contextlib.suppress(FileNotFoundError):
                self.settings.server.socket.unlink()
        self._unix = self._tcp = self._advice = None
        self._relay = None
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics.server_close()
            self._metrics = None
