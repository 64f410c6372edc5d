"""`harp serve`: run the prediction daemon until SIGTERM; SIGHUP reloads config and models."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable

from slurm_harp.commands.arguments import config_option, settings_at
from slurm_harp.commands.signal_wait import SignalWait
from slurm_harp.config import Settings
from slurm_harp.server import heap
from slurm_harp.server.daemon import Daemon, StuckServer
from slurm_harp.server.socket_path import DaemonError, start_problem

log = logging.getLogger(__name__)
# How often the loop checks that the socket is still there: a removed socket fails every
# submission open until it is bound again.
SOCKET_CHECK_S = 5.0
# Predict is answered in grpcio's polling thread; while another thread of the daemon runs Python
# (the history feed reading the store, a model loading), each call waits for the interpreter until
# that thread is made to let go, after this long: CPython's 5 ms puts whole polls into the
# submissions' p99 (docs/benchmarks.md, "The history feed's polls").
SWITCH_INTERVAL_S = 0.0005


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("serve", help="run the prediction daemon")
    config_option(p, "TOML configuration")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_at(args.config)
    if settings is None:
        return 2
    if (problem := start_problem(settings)) is not None:  # before anything is bound: nothing left
        log.error("%s", problem)
        return 2
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    daemon = Daemon(settings, settle=heap.settle)
    with SignalWait() as signals:  # before start: a SIGTERM while it binds stops it cleanly
        try:
            daemon.start()
        except DaemonError as exc:
            log.error("not starting: %s", exc)
            daemon.stop(0)
            return 1
        try:
            _loop(daemon, settings, signals)
        except StuckServer as exc:  # only a new process can bind the socket again
            log.error("%s", exc)
            daemon.stop()
            return 1
        daemon.stop()  # still in the block: a second SIGTERM does not cut the grace period short
    log.info("stopped")
    return 0


def _loop(daemon: Daemon, settings: Settings, signals: SignalWait) -> None:
    """Tend the daemon until a stop signal: reload on SIGHUP, check the socket, poll the store,
    read the memory slurmctld gives a job that asks none (every few minutes)."""
    polled = time.monotonic()
    while True:
        _tend(daemon.poll_memory_defaults)
        signals.wait(min(settings.server.store_poll_seconds, SOCKET_CHECK_S))
        if signals.stop is not None:  # before a reload that came with it: that would only delay it
            log.info("signal %s: shutting down", signals.stop.name)
            return
        if signals.reload:
            signals.reload = False
            log.info("SIGHUP: reloading configuration and models")
            _tend(daemon.reload)
            continue
        _tend(daemon.check_socket)
        if time.monotonic() - polled >= settings.server.store_poll_seconds:
            polled = time.monotonic()
            _tend(daemon.poll_store)


def _tend(chore: Callable[[], object]) -> None:
    """Run one of the loop's chores. The gRPC threads answer the submissions meanwhile: an error
    here is logged and the chore tried again on its next turn, never the end of the daemon, but for
    a socket that only a restart can bind again (StuckServer)."""
    try:
        chore()
    except StuckServer:
        raise
    except Exception:
        log.exception("%s failed; serving on, trying again on the next turn", chore.__name__)
