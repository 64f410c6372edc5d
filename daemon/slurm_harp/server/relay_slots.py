"""Which connections the advice relay (peer_relay) keeps, so that no group of users can keep
another out.

A fixed cap per uid alone (the relay's was a quarter of the slots) lets a few uids together hold
every slot: four users, each at their cap, and nobody else was served. So when every slot is
taken, a uid holding fewer connections than the uid holding the most takes one of that uid's: the
one idle longest (no byte either way) among the biggest holders' is closed for it. Hence:

- a uid holding no connection is always served;
- a uid's only connection is closed for another only when every slot holds a different uid's
  (``total`` users at once): fewer colluding uids than slots can crowd out only each other;
- a connection that carries bytes is closed after the idle ones of its kind.

The cap per uid stays (one user's calls in flight, each a thread of the advice server): a uid at
its cap is refused rather than served by closing one of its own.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass, field


@dataclass(eq=False)
class Relayed:
    """One relayed connection: whose, its two sockets, and when a byte last crossed it."""

    uid: int
    conn: socket.socket
    inner: socket.socket | None = None  # the connection to the gRPC server, once made
    active: float = field(default_factory=time.monotonic)

    def idle_s(self) -> float:
        return time.monotonic() - self.active

    def end(self) -> None:
        """Shut both sockets down: the pumps wake, end and release the slot."""
        for sock in (self.conn, self.inner):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class Slots:
    """``total`` connections at most, ``per_uid`` for any one uid; not thread-safe (the relay
    holds its lock)."""

    def __init__(self, total: int, per_uid: int) -> None:
        self.total = total
        self.per_uid = per_uid
        self._held: dict[int, list[Relayed]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def take(self, relayed: Relayed) -> tuple[bool, Relayed | None]:
        """(whether ``relayed`` has a slot now, the connection that lost its slot for it: the
        caller ends it). Refused: its uid is at its cap, or holds as many as any other."""
        mine = len(self._held.get(relayed.uid, ()))
        if mine >= self.per_uid:
            return False, None
        victim = None
        if self._count >= self.total:
            most = max(len(held) for held in self._held.values())
            if mine >= most:
                return False, None
            biggest = (r for held in self._held.values() if len(held) == most for r in held)
            victim = min(biggest, key=lambda r: r.active)
            self.give_back(victim)
        self._held.setdefault(relayed.uid, []).append(relayed)
        self._count += 1
        return True, victim

    def give_back(self, relayed: Relayed) -> None:
        """Free ``relayed``'s slot; nothing if it has none (it lost it, or gave it back)."""
        held = self._held.get(relayed.uid, [])
        if relayed in held:
            held.remove(relayed)
            self._count -= 1
            if not held:
                del self._held[relayed.uid]
