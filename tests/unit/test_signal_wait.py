"""SignalWait, the wait of `harp serve` and `harp guard`: a real signal sent to this process ends it
at once, wherever the signal lands, and its handler takes no lock (threading.Event.set() from a
handler could wait for ever on a lock its own thread held)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from slurm_harp.commands.signal_wait import SignalWait

pytestmark = pytest.mark.timeout(30)  # a wait that is not woken fails, not hangs
LONG_S = 20.0  # a wait the signal must cut short
AT_ONCE_S = 5.0  # generous: the machine is shared


def later(send: Callable[[], None], delay: float = 0.05) -> threading.Timer:
    """``send`` from another thread after ``delay``: the main thread is in the wait by then."""
    timer = threading.Timer(delay, send)
    timer.start()
    return timer


def timed_wait(signals: SignalWait, timeout: float) -> float:
    start = time.monotonic()
    signals.wait(timeout)
    return time.monotonic() - start


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_ends_the_wait_at_once_and_says_which(sig: signal.Signals) -> None:
    with SignalWait() as signals:
        later(lambda: os.kill(os.getpid(), sig))
        assert timed_wait(signals, LONG_S) < AT_ONCE_S
        assert (signals.stop, signals.reload) == ((None, True) if sig == signal.SIGHUP else (sig, False))


@pytest.fixture
def parked() -> Iterator[threading.Thread]:
    """A thread blocked for the test: a signal sent to it runs CPython's C handler there."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    yield thread
    release.set()
    thread.join()


def test_a_signal_caught_in_another_thread_ends_the_wait_at_once(parked: threading.Thread) -> None:
    """As in `harp serve`, whose grpcio threads may catch a SIGTERM: only the byte wakes the poll."""
    assert parked.ident is not None
    with SignalWait() as signals:
        later(lambda: signal.pthread_kill(parked.ident or 0, signal.SIGTERM))
        assert timed_wait(signals, LONG_S) < AT_ONCE_S
        assert signals.stop == signal.SIGTERM


def test_a_signal_before_the_wait_ends_it_and_a_handled_one_ends_no_later_wait() -> None:
    with SignalWait() as signals:
        os.kill(os.getpid(), signal.SIGHUP)  # during the loop's work, not in the wait
        assert timed_wait(signals, LONG_S) < AT_ONCE_S and signals.reload
        signals.reload = False  # the loop reloads
        assert timed_wait(signals, 0.3) >= 0.3  # its byte, still there, does not end this one
        assert not signals.reload and signals.stop is None


def test_other_signals_wake_the_poll_but_the_wait_lasts_its_time() -> None:
    seen: list[int] = []
    before = signal.signal(signal.SIGUSR1, lambda signum, _frame: seen.append(signum))
    try:
        with SignalWait() as signals:
            later(lambda: os.kill(os.getpid(), signal.SIGUSR1))
            assert timed_wait(signals, 0.5) >= 0.5
            assert seen == [signal.SIGUSR1] and signals.stop is None and not signals.reload
    finally:
        signal.signal(signal.SIGUSR1, before)


def wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


def test_the_previous_handlers_and_wakeup_fd_are_put_back_even_after_an_error() -> None:
    def mine(_signum: int, _frame: FrameType | None) -> None:
        pass

    sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    saved = {sig: signal.signal(sig, mine) for sig in sigs}
    theirs, spare = socket.socketpair()
    theirs.setblocking(False)
    saved_fd = signal.set_wakeup_fd(theirs.fileno())
    try:
        with pytest.raises(RuntimeError), SignalWait():
            assert wakeup_fd() != theirs.fileno()
            assert all(signal.getsignal(sig) is not mine for sig in sigs)
            raise RuntimeError("the loop's bug")
        assert wakeup_fd() == theirs.fileno()
        assert all(signal.getsignal(sig) is mine for sig in sigs)
    finally:
        signal.set_wakeup_fd(saved_fd)
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        theirs.close()
        spare.close()


def calls_while_handling(sig: signal.Signals) -> list[str]:
    """Every Python function and builtin called from os.kill's return until the handler is done."""
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        elif event == "c_call":
            calls.append(f"builtin:{getattr(arg, '__qualname__', arg)}")

    sys.setprofile(profile)
    try:
        os.kill(os.getpid(), sig)
        for _ in range(3):  # jumps back: the pending handler runs by the last one
            pass
    finally:
        sys.setprofile(None)
    return calls


def locking(calls: list[str]) -> list[str]:
    """The calls of ``calls_while_handling`` that are threading's or take a lock."""
    return [c for c in calls if "threading" in c or "acquire" in c or "__enter__" in c]


@contextlib.contextmanager
def handlers_kept() -> Iterator[None]:
    """Put the stop and reload signals' handlers back after the block, whatever it installed."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_the_handler_takes_no_lock(sig: signal.Signals) -> None:
    """Handlers run in the main thread between bytecodes, maybe while it holds a lock: the handler
    calls nothing of threading and acquires nothing. The probe catches Event.set(), the handler
    `harp serve` and `harp guard` had."""
    with SignalWait():
        calls = calls_while_handling(sig)
    assert any(call.endswith(":_on_signal") for call in calls), calls
    assert locking(calls) == []

    event = threading.Event()
    before = signal.signal(signal.SIGHUP, lambda _signum, _frame: event.set())
    try:
        calls = calls_while_handling(signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, before)
    assert event.is_set() and any(call.endswith("threading.py:set") for call in calls), calls
    assert any("__enter__" in c for c in calls), calls


def test_a_held_event_lock_does_not_stop_the_handler() -> None:
    """The deadlock of the old handlers, made certain: the main thread holds an Event's lock when
    the signal comes. Event.set() there would wait for ever; SignalWait's handler does not care."""
    event = threading.Event()
    # What Event.wait() holds once its Condition wakes, and Event.clear() and set() hold.
    with SignalWait() as signals, event._cond:  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(3):
            pass
        assert signals.stop == signal.SIGTERM
