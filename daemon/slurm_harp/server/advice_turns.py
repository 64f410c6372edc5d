"""Whose advice is computed next: a few calls at a time, one per user, the user served least
recently first.

One user may hold a quarter of the advice socket's connections, a call on each (server/peer_relay.py).
Were turns taken first come, first served, those calls would stand ahead of another user's first
call, and each of them would be computed. So a uid computes one call at a time, a free turn goes
to the waiting call whose uid began its last turn longest ago (never: first; then arrival), and a
call whose client has left (cancelled, past its deadline, disconnected) leaves the queue
uncomputed. docs/advice.md, "Bounds".
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NoTurn", "Turns"]


class NoTurn(Exception):
    """The call left the queue: its time ran out, or its client left."""


class Turns:
    def __init__(self, at_once: int) -> None:
        self._at_once = at_once
        self._changed = threading.Condition()
        self._busy: set[int] = set()  # uids computing
        self._waiting: dict[int, int] = {}  # ticket (arrival order) -> uid
        self._last_turn: dict[int, int] = {}  # uid -> when it began its last turn (tickets' clock)
        self._clock = itertools.count(1)

    def wake(self) -> None:
        """Look at the queue again: a client has left (its call's ``left`` is set)."""
        with self._changed:
            self._changed.notify_all()

    @contextmanager
    def turn(self, uid: int, timeout: float | None, left: threading.Event) -> Iterator[None]:
        """Hold a turn for ``uid`` once it is theirs; NoTurn when ``timeout`` seconds pass or
        ``left`` is set first (then ``wake``)."""
        with self._changed:
            ticket = next(self._clock)
            self._waiting[ticket] = uid
            try:
                if not self._changed.wait_for(lambda: left.is_set() or self._next() == ticket, timeout):
                    raise NoTurn("no turn within the call's deadline")
                if left.is_set():
                    raise NoTurn("the client left")
            finally:
                del self._waiting[ticket]
                self._changed.notify_all()  # the next in line may be another call now
            self._busy.add(uid)
            self._last_turn[uid] = next(self._clock)
        try:
            yield
        finally:
            with self._changed:
                self._busy.discard(uid)
                if uid not in self._waiting.values():
                    self._last_turn.pop(uid, None)  # kept for the uids waiting or computing only
                self._changed.notify_all()

    def _next(self) -> int | None:
        """The ticket whose turn it is, if a turn is free."""
        if len(self._busy) >= self._at_once:
            return None
        free = [
            (self._last_turn.get(uid, 0), ticket)
            for ticket, uid in self._waiting.items()
            if uid not in self._busy
        ]
        return min(free)[1] if free else None
