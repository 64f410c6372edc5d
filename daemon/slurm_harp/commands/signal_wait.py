"""The long-running commands' wait: a loop's period, cut short by SIGTERM, SIGINT or SIGHUP.

A Python signal handler runs in the main thread between two bytecodes, maybe while that thread holds
a lock. ``threading.Event.set()`` takes the Event's own lock (a plain Lock under its Condition), which
the main thread holds inside ``Event.wait()``, ``clear()`` and ``set()``: from a handler it can wait
for ever on its own thread (CPython's multiprocessing.Event has the same bug: gh-126434). A guard
hung so would lose its clean-stop save to systemd's SIGKILL.

So the handlers here only set attributes, and the wake-up comes from C: ``signal.set_wakeup_fd``
makes CPython's C-level handler write a byte to a socket (async-signal-safe), and ``wait`` polls the
other end. The byte arrives even when the signal lands in another thread (grpcio's) or just before
the poll; a signal in the poll itself makes it retry (PEP 475) and find the byte.
"""

from __future__ import annotations

import select
import signal
import socket
import time
from types import FrameType, TracebackType
from typing import Any

STOP = (signal.SIGTERM, signal.SIGINT)
RELOAD = signal.SIGHUP


class SignalWait:
    """``with SignalWait() as signals:`` installs the handlers and the wake-up socket in the main
    thread, and puts the previous handlers and wake-up fd back at the end of the block.

    ``stop`` is the first stop signal received (None until then); ``reload`` is True once SIGHUP
    has come, until the loop sets it back to False as it reloads."""

    def __init__(self) -> None:
        self.stop: signal.Signals | None = None
        self.reload = False
        self._previous: dict[int, Any] = {}
        self._previous_fd: int | None = None

    def __enter__(self) -> SignalWait:
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)  # set_wakeup_fd refuses a blocking fd; draining must not block
        self._poll = select.poll()
        self._poll.register(self._reader, select.POLLIN)
        try:
            # The fd first: a signal caught between the two already has its byte written.
            self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
            for signum in (*STOP, RELOAD):
                self._previous[signum] = signal.signal(signum, self._on_signal)
        except BaseException:  # not the main thread (ValueError): leave everything as it was
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._previous_fd is not None:
            signal.set_wakeup_fd(self._previous_fd)
            self._previous_fd = None
        self._reader.close()
        self._writer.close()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # Attributes only: no lock, no I/O (the loop logs what it was told).
        if signum == RELOAD:
            self.reload = True
        elif self.stop is None:
            self.stop = signal.Signals(signum)

    def wait(self, timeout: float) -> None:
        """Return after ``timeout`` seconds, or at once when a stop or a reload is pending. Any
        other signal with a Python handler wakes the poll too; the wait then goes on to its end."""
        deadline = time.monotonic() + timeout
        # A byte whose handler has not run yet: back at the loop's test, the interpreter runs the
        # pending handlers (it checks for them on every jump back), so the test sees their flags.
        while self.stop is None and not self.reload:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._poll.poll(left * 1000.0):
                self._drain()

    def _drain(self) -> None:
        """Read every byte there (one a signal): one left would wake each poll at once, a busy loop."""
        try:
            while self._reader.recv(4096):
                pass
        except BlockingIOError:
            pass
