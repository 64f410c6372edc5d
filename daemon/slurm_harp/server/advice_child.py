"""The advice process itself (server.advice_process starts it): serves the advice socket with
``serve_advice`` until the daemon asks it to stop, or dies; at nice NICE, its stop and reload
signals left to the daemon."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from multiprocessing.connection import Connection
from types import FrameType

from slurm_harp import LOG_FORMAT
from slurm_harp.config import Settings
from slurm_harp.server.advice_socket import serve_advice
from slurm_harp.server.socket_path import DaemonError

log = logging.getLogger("slurm_harp.server.advice_child")  # not __main__
NICE = 10  # on a busy controller, slurmctld and the daemon's Predict come first
ORPHAN_WAIT_S = 2.0  # the parent gone: how long the child waits for its server's stop
# The stop and reload signals are the daemon's to act on (main() says why). Blocked by the daemon
# from before this process's exec until it has its handlers: one in its first half second killed it.
HELD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    """The child: ``argv`` is the connection's fd and the parent's log level."""
    for signum in HELD:
        # The unit's SIGTERM reaches every process of it, a terminal's SIGINT the process group:
        # the parent stops this one in order, and SIGHUP comes as new Settings from the parent. A
        # handler, not SIG_IGN: an ignored signal stays ignored in the scontrol this process runs.
        signal.signal(signum, _unheeded)
    # Blocked by the parent until now (HELD); one that came meanwhile is handled here, unheeded.
    # Unblocked before serving: the scontrol this process runs inherits its mask.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
    logging.basicConfig(level=int(argv[1]), format=LOG_FORMAT, stream=sys.stderr)  # the daemon's stderr
    try:
        os.nice(NICE)
    except OSError as exc:
        log.warning("advice process: cannot lower its CPU priority: %s", exc.strerror or exc)
    conn = Connection(int(argv[0]))
    try:
        settings = conn.recv()
    except EOFError:
        return 0
    try:
        return _serve(conn, settings)
    except (EOFError, OSError):
        return 0  # the parent died before the answer to the start


def _serve(conn: Connection, settings: Settings) -> int:
    """Serve the advice socket until the parent asks this to stop, or dies."""
    current = settings

    def settings_now() -> Settings:
        return current

    assert settings.advice.socket is not None  # the parent starts no child without one
    try:
        server, relay = serve_advice(settings.advice.socket, settings_now)
    except DaemonError as exc:
        conn.send(("error", str(exc)))
        return 1
    except Exception as exc:  # a bug: its traceback here, the parent's start a DaemonError
        log.exception("advice process: cannot start")
        conn.send(("error", f"advice.socket: the advice process failed at start: {exc!r}"))
        return 1
    try:
        conn.send(("ok", str(relay.inner.parent)))
    except OSError:  # the parent died while this started: as below, nothing left behind
        log.warning("advice process: the daemon is gone; stopping")
        relay.stop()
        server.stop(0).wait(ORPHAN_WAIT_S)
        return 0
    grace, wait_s = 0.0, ORPHAN_WAIT_S
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            log.warning("advice process: the daemon is gone; stopping")
            break
        if isinstance(message, Settings):
            current = message
        elif message == "check":
            try:
                relay.check_socket()
            except Exception:  # as the daemon's loop does: logged, tried again at the next check
                log.exception("advice process: check_socket failed; serving on")
            with contextlib.suppress(OSError):  # the parent gone: recv() says so next
                conn.send("checked")
        elif isinstance(message, tuple) and message[0] == "stop":
            _, grace, wait_s = message
            break
    relay.stop()  # no new connection; the open ones end
    if not server.stop(grace).wait(wait_s):
        log.error(
            "the advice server did not stop within %g s (a client not reading its answers holds a "
            "connection open): exiting without it",
            wait_s,
        )
    return 0


def _unheeded(signum: int, frame: FrameType | None) -> None:
    """The stop and reload signals: the parent's to act on."""


if __name__ == "__main__":
    code = main(sys.argv[1:])
    logging.shutdown()
    # Not sys.exit: at exit concurrent.futures joins its threads, and an advice call still computing
    # (or stuck in a stopped server) would hold the exit.
    os._exit(code)
