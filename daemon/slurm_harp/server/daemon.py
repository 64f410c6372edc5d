"""The prediction daemon's lifecycle: bind, load, serve, reload on SIGHUP, drain on shutdown."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2
from prometheus_client import CollectorRegistry

from slurm_harp.config import ConfigError, Settings, load
from slurm_harp.config.start_only import keep_daemon_part
from slurm_harp.core.features import vectorize
from slurm_harp.core.predictor import HistorySource, Predictor, QuantilePredictor
from slurm_harp.core.request import Target
from slurm_harp.heartbeat import HeartbeatFile
from slurm_harp.model.store import ModelStore
from slurm_harp.server.advice_process import AdviceProcess, Exiting
from slurm_harp.server.history_feed import HistoryFeed
from slurm_harp.server.listeners import STOP_MARGIN_S, grpc_server, metrics_server, unix_server
from slurm_harp.server.metrics_http import MetricsServer
from slurm_harp.server.outcome_metrics import OutcomeMetrics
from slurm_harp.server.reloader import reload_models, store_fingerprint
from slurm_harp.server.service import SERVICE, PredictorService
from slurm_harp.server.serving_metrics import ServingMetrics
from slurm_harp.server.slurm_memory_defaults import SlurmMemoryDefaults
from slurm_harp.server.socket_path import DaemonError, remove_socket_dirs, start_problem

log = logging.getLogger(__name__)
SERVICE_NAME = SERVICE
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# How long start() waits for the job history to be seeded before serving anyway (users whose
# history is not loaded yet are cold: annotated, not rewritten).
HISTORY_SEED_WAIT_S = 60.0


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
        # What slurmctld gives a job that asks no memory, read with scontrol by `harp serve`'s loop.
        self._memory_defaults = SlurmMemoryDefaults(self.predictor.use_memory_defaults)
        self.health = health.HealthServicer()
        self._unix: grpc.Server | None = None
        self._tcp: grpc.Server | None = None
        self._advice: AdviceProcess | None = None  # its own process: pricing holds the GIL
        self._metrics: MetricsServer | None = None
        self._socket_id = (0, 0)  # (st_dev, st_ino) of the socket this daemon bound
        self._made_dirs: list[Path] = []  # the socket's directories this start made
        self._taken_over = False
        self._advice_failure: str | None = None  # the advice check's last error, logged once
        self._fingerprint: tuple[object, ...] = ()
        self._models_store: Path | None = None  # the store the serving models were loaded from
        self._lock = threading.Lock()  # one reload at a time (SIGHUP and the store poller)

    def start(self) -> None:
        """Bind first (NOT_SERVING), then load models, then report SERVING. DaemonError when the
        socket cannot be taken (another daemon answers on it) or an address not bound; what was
        bound by then is closed, and no socket left behind (whatever the error)."""
        cfg = self.settings.server
        self._set_health(NOT_SERVING)
        self._unix = self._serve_unix(cfg.socket)
        try:
            if cfg.tcp:  # a server of its own, so that the socket can be bound again alone
                self._tcp = self._start_server(cfg.tcp, "server.tcp")
            if cfg.metrics_port is not None:
                self._metrics = metrics_server(cfg.metrics_address, cfg.metrics_port, self.registry)
            log.info("listening on unix:%s%s", cfg.socket, f" and {cfg.tcp}" if cfg.tcp else "")
            if self.settings.advice.socket is not None:
                self._advice = AdviceProcess()
                self._advice.start(self.settings)
        except BaseException:  # not only DaemonError: a socket left behind is taken for a live daemon's
            self._unbind(0)
            remove_socket_dirs(self._made_dirs)  # under Restart=always, one more at every start
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
        """A started gRPC server on ``address`` (listeners.grpc_server); DaemonError naming ``key``."""
        service = PredictorService(self.predictor, self.metrics)
        return grpc_server(address, key, self.settings.server, service, self.health)

    def _serve_unix(self, sock: Path) -> grpc.Server:
        """The server on ``sock``, with its group and mode (listeners.unix_server)."""
        server, self._socket_id, self._made_dirs = unix_server(sock, self.settings, self._start_server)
        return server

    def check_socket(self) -> None:
        """Bind the socket again if something removed it (a tmpfiles cleaner, an rm): until then
        every submission fails open. A path taken over by something else is left alone. Then the
        advice process's check; whatever it raises is logged, once while it goes on."""
        self._check_submission_socket()
        if self._advice is None:
            return
        try:  # and started again, should it have died
            self._advice.check(self.settings)
        except Exception as exc:
            if repr(exc) != self._advice_failure:
                log.exception("the advice process's check failed; trying again on the next turn")
            self._advice_failure = repr(exc)
        else:
            self._advice_failure = None

    def _check_submission_socket(self) -> None:
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
            store = self.settings.store
            fingerprint = store_fingerprint(store)
            serving = self.predictor.models
            if self._models_store not in (None, store):  # [store] path changed: as at a start
                log.warning(
                    "model store moved from %s to %s: loading it as at a start, none of the old "
                    "store's models (%s) carried over", self._models_store, store, _versions(serving),
                )  # fmt: skip
                serving = {}
            result = reload_models(store, serving, self.metrics)
            self.predictor.swap(models=result.models)
            self._fingerprint = fingerprint
            self._models_store = store
            if self._settle is not None:  # loading leaves the onnx package's objects behind
                self._settle()
            return result.rejected

    def reload(self) -> None:
        """SIGHUP: re-read the config file and the models. A bad config keeps the old one: bad as
        `harp serve` would find it at its next start, this host's checks too (start_problem)."""
        source = self.settings.source
        fresh = _reread(source) if source is not None else None
        if fresh is not None:
            applied, changed = keep_daemon_part(fresh, self.settings)  # config/start_only.py
            for name in changed:
                log.warning("reload: %s changes take effect only after a restart", name)
            self.settings = replace(applied, source=source)
            self.predictor.swap(policy=fresh.policy)
            if self._advice is not None:  # [billing] changes
                self._advice.update(self.settings)
            log.info("reload: configuration re-read from %s", source)
        self._memory_defaults.read_soon()  # a site that changed a partition's default says so
        self.reload_models()

    def poll_store(self) -> None:
        """Pick up a promoted model without a signal (cheap: reads the CURRENT pointers and lists
        their versions' files). A version rejected is tried again once a file of it changes (a
        copy completed), its rejection logged once per state of its files."""
        if store_fingerprint(self.settings.store) != self._fingerprint:
            log.info("model store changed; reloading")
            self.reload_models()

    def poll_memory_defaults(self) -> None:
        """Read the memory defaults again when due, in a thread (server.slurm_memory_defaults)."""
        self._memory_defaults.poll_in_background()

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
        cfg = self.settings
        stopping: dict[str, threading.Event | Exiting] = {}
        if self._advice is not None:  # the child stops its relay, then its server, likewise
            stopping[f"unix:{cfg.advice.socket}"] = self._advice.stop(grace, grace + STOP_MARGIN_S)
        servers = {f"unix:{cfg.server.socket}": self._unix, str(cfg.server.tcp): self._tcp}
        stopping |= {name: server.stop(grace) for name, server in servers.items() if server is not None}
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
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None


def _versions(models: Mapping[Target, QuantilePredictor]) -> str:
    return ", ".join(f"{t.value} {m.version}" for t, m in models.items()) or "none"


def _reread(source: Path) -> Settings | None:
    """The file at ``source`` if `harp serve` could start with it, else None, the problem logged
    (a socket group this host lacks was taken in, and the next start refused the file)."""
    try:
        fresh = load(source)
    except ConfigError as exc:
        log.error("reload: keeping the previous configuration: %s", exc)
        return None
    except Exception:  # a reader's bug must not end the daemon that serves every job
        log.exception("reload: keeping the previous configuration: reading %s failed", source)
        return None
    if (problem := start_problem(fresh)) is not None:
        log.error("reload: keeping the previous configuration: %s", problem)
        return None
    return fresh
