"""The advice socket served by a child process of `harp serve` (server.advice_child), started,
watched and stopped from here.

Pricing advice is CPU-bound Python. In the daemon's own process it held the interpreter (the GIL)
while Predict waited for it: two users looping heavy `harp advise` calls took slurmctld's calls near
the plugin's 50 ms deadline, past which its circuit breaker switches harp off for every job
(benchmarks/bench_advice_load.py). The child has an interpreter of its own, at a lower CPU priority.

The two talk over a socketpair in multiprocessing's Connection (pickled messages; not
multiprocessing's own start methods: spawn starts a resource-tracker process besides). The parent
sends the Settings first, then new Settings at each reload, "check" (check_socket) and
("stop", grace, wait_s); the child answers its start once, ("ok", relay's private directory) or
("error", the DaemonError's message), and each "check" with "checked". The parent sends no "check"
before the last one is answered, and nothing to a child that cannot take it at once: a child frozen
(SIGSTOP) would otherwise fill the socketpair and block the daemon's loop. One that leaves a check
unanswered for UNRESPONSIVE_S is killed and started again. The child ends when asked, or when the
connection ends: the parent died, even by SIGKILL.

Started as `python -P -m`: `-m` alone puts the current directory first on sys.path, and a module
planted there (a `shutil.py` where `harp serve` was started) would run as the daemon's user.
"""

from __future__ import annotations

import contextlib
import logging
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

from slurm_harp.config import Settings
from slurm_harp.server.advice_child import HELD
from slurm_harp.server.advice_leftovers import remove_dead
from slurm_harp.server.socket_path import DaemonError

log = logging.getLogger(__name__)
MODULE = "slurm_harp.server.advice_child"  # run as python -P -m MODULE
START_WAIT_S = 30.0  # for the child to serve, or to say why not
# A child that keeps dying (killed by the OOM killer, say) is started again at most this often: each
# start costs a second of the controller's CPU, and a log line.
RESTART_EVERY_S = 30.0
EXIT_S = 1.0  # of a stop's time, what the child keeps to log and exit after its server's stop
UNRESPONSIVE_S = 30.0  # a check left unanswered this long: the child is frozen, or stuck; killed
SEND_WAIT_S = 1.0  # for room in the socketpair; none by then: taken as unresponsive


class AdviceProcess:
    """The child serving ``[advice] socket``, started again when it dies."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None  # None: no live child (stopped, or its death handled)
        self._private: Path | None = None  # its relay's private directory
        self._socket: Path | None = None  # the advice socket it serves
        self._checked: float | None = None  # when the check not answered yet was sent
        self._restarted = float("-inf")

    def start(self, settings: Settings) -> None:
        """Start a child and wait until it serves. DaemonError with the child's own message, or
        saying how it failed (died, silent for START_WAIT_S: then killed)."""
        assert settings.advice.socket is not None  # the daemon starts none without one
        self._socket = settings.advice.socket
        remove_dead(self._socket)  # what a child killed before left
        ours, theirs = socket.socketpair()
        level = str(logging.getLogger("slurm_harp").getEffectiveLevel())  # its lines as the daemon's
        with theirs:
            argv = [sys.executable, "-P", "-m", MODULE, str(theirs.fileno()), level]
            held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)  # the child inherits the mask
            try:  # close_fds: the child holds no socket of the parent's but its end of the pair
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), close_fds=True
                )
            except OSError as exc:
                ours.close()
                raise DaemonError(f"advice.socket: cannot start the advice process: {exc}") from None
            finally:  # this thread's own: a signal held meanwhile is handled now
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        conn = Connection(ours.detach())
        reply: object = None
        silent = False
        try:
            conn.send(settings)
            silent = not conn.poll(START_WAIT_S)
            if not silent:
                reply = conn.recv()
        except (OSError, EOFError):
            pass  # it died: said below
        if isinstance(reply, tuple) and reply[0] == "ok":
            self._proc, self._conn, self._private = proc, conn, Path(reply[1])
            self._checked = None
            log.info("advice served by process %d", proc.pid)
            return
        conn.close()
        if isinstance(reply, tuple) and reply[0] == "error":
            _end(proc)
            raise DaemonError(str(reply[1]))
        if silent:
            _end(proc, 0.0)
            remove_dead(self._socket)
            raise DaemonError(
                f"advice.socket: the advice process did not start within {START_WAIT_S:g} s (killed)"
            )
        raise DaemonError(f"advice.socket: the advice process {_how(proc)} before serving")

    def update(self, settings: Settings) -> None:
        """A reload's Settings, for the calls from now on."""
        self._send(settings)

    def check(self, settings: Settings) -> None:
        """The child's check_socket. A child that died is logged once and started again with
        ``settings``, at most every RESTART_EVERY_S; until then users get no advice."""
        if self._proc is None:
            return  # not started, or stopped
        if self._conn is not None and self._proc.poll() is None and self._answering():
            if self._checked is None and self._send("check"):
                self._checked = time.monotonic()
            if self._conn is not None:  # not killed as unresponsive by the send
                return
        if self._conn is not None:  # died (one killed as unresponsive is logged and forgotten)
            how = _how(self._proc)
            self._forget()
            log.error("the advice process %d %s: %s", self._proc.pid, how, self._next_start())
        if time.monotonic() - self._restarted < RESTART_EVERY_S:
            return
        self._restarted = time.monotonic()
        try:
            self.start(settings)
        except DaemonError as exc:
            log.error("%s (next try in %g s)", exc, RESTART_EVERY_S)

    def _next_start(self) -> str:
        """When the next child starts, for the log line of the last one's death."""
        wait = RESTART_EVERY_S - (time.monotonic() - self._restarted)
        return "starting a new one" if wait <= 0 else f"starting a new one in {wait:.0f} s"

    def _answering(self) -> bool:
        """Whether the child answers its checks (its answers read); one that has left a check
        unanswered for UNRESPONSIVE_S is logged and killed, and False."""
        assert self._conn is not None and self._proc is not None
        with contextlib.suppress(OSError, EOFError):  # died: poll() says so next
            while self._conn.poll(0):
                if self._conn.recv() == "checked":
                    self._checked = None
        if self._checked is None or time.monotonic() - self._checked < UNRESPONSIVE_S:
            return True
        self._kill(f"left a socket check unanswered for {UNRESPONSIVE_S:g} s")
        return False

    def _kill(self, why: str) -> None:
        """Kill the child, which ``why`` says is unresponsive, and forget it (check() starts another)."""
        assert self._proc is not None
        _end(self._proc, 0.0)
        self._forget()
        log.error("the advice process %d %s: killed", self._proc.pid, why)

    def stop(self, grace: float, within: float) -> Exiting:
        """Ask the child to stop (calls given ``grace``); wait on what this returns for at most
        ``within`` seconds, past which the child is killed. A child found dead is logged, and what
        it left removed."""
        proc = self._proc
        if proc is not None and self._conn is not None and proc.poll() is not None:
            log.error("the advice process %d %s", proc.pid, _how(proc))  # since the last check
            self._forget()
        sent = self._send(("stop", grace, max(0.0, within - EXIT_S)))
        self._proc = None
        if sent:
            assert self._conn is not None
            self._conn.close()
            self._conn = None
            private, self._private = self._private, None
            return Exiting(proc, private, self._socket)
        if proc is not None:  # died as it was asked (the send failed): ended now
            _end(proc, 0.0)
        self._forget()
        if self._socket is not None:
            remove_dead(self._socket)
        return Exiting(None, None, None)

    def _send(self, message: object) -> bool:
        """Whether ``message`` was sent. A child dead is left to check(); one with no room for it
        within SEND_WAIT_S is killed as unresponsive."""
        if self._conn is None:
            return False
        try:
            room = select.poll()  # not select(): it refuses a descriptor past 1023
            room.register(self._conn.fileno(), select.POLLOUT)
            if not room.poll(SEND_WAIT_S * 1000):
                self._kill(f"took no message for {SEND_WAIT_S:g} s")
                return False
            self._conn.send(message)
        except OSError:  # died: check() says so and starts another
            return False
        return True

    def _forget(self) -> None:
        """The dead child's connection and private directory (its socket the next one claims)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None


class Exiting:
    """A child asked to stop; ``wait`` as grpc's server.stop() future is waited on."""

    def __init__(self, proc: subprocess.Popen[bytes] | None, private: Path | None, sock: Path | None) -> None:
        self._proc, self._private, self._socket = proc, private, sock

    def wait(self, timeout: float) -> bool:
        """Whether it exited within ``timeout`` seconds; if not it is killed. One killed, or dead
        of something else meanwhile, leaves its directory and socket: removed here."""
        if self._proc is None:
            return True
        killed = _end(self._proc, timeout)
        if killed or self._proc.returncode != 0:
            if self._private is not None:
                shutil.rmtree(self._private, ignore_errors=True)
            if self._socket is not None:
                remove_dead(self._socket)
        return not killed


def _end(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> bool:
    """Wait ``timeout`` seconds for ``proc``, then kill it; whether it had to be killed."""
    try:
        proc.wait(timeout)
        return False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True


def _how(proc: subprocess.Popen[bytes]) -> str:
    """How ``proc`` ended, for a log line: "exited with status 1", "was killed by SIGKILL"."""
    _end(proc)  # its end of the connection is closed: it is exiting
    status = proc.returncode
    if status >= 0:
        return f"exited with status {status}"
    try:
        return f"was killed by {signal.Signals(-status).name}"
    except ValueError:  # a real-time signal (SIGRTMIN+1 is 35): no name in signal.Signals
        return f"was killed by signal {-status}"
