"""The advice relay's admission when a pump thread cannot start (a thread limit, TasksMax)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_harp.server.peer_relay import PeerRelay


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[PeerRelay]:
    """A started relay of 4 connections (1 per uid) in front of a stand-in for the gRPC server
    that accepts and holds every connection."""
    relay = PeerRelay(tmp_path / "advice.sock", max_connections=4)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(relay.inner))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    relay.start()
    try:
        yield relay
    finally:
        relay.stop()
        server.close()
        for conn in held:
            conn.close()


def until(condition: object, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.02)
    return False


def pumps() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in ("harp-advice-in", "harp-advice-out")]


@pytest.mark.parametrize("failing", ["harp-advice-in", "harp-advice-out"])
def test_a_pump_that_cannot_start_gives_its_slot_back(
    relay: PeerRelay, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name == failing:
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.connect(str(relay.public))
    first.settimeout(5)
    assert first.recv(1) == b"", "the connection that could not be relayed is closed"
    assert until(lambda: relay.open_connections == 0 and not relay._peers and not relay._open)
    # A pump that did start (the "in" one, when "out" failed) ends: it waited on the barrier for ever.
    assert until(lambda: not pumps())
    first.close()
    monkeypatch.setattr(threading.Thread, "start", real_start)
    # The same uid, one connection per uid: admitted, so the slot came back.
    second = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    second.connect(str(relay.public))
    assert until(lambda: relay.open_connections == 1)
    second.settimeout(0.5)
    with pytest.raises(TimeoutError):
        second.recv(1)  # held open, not closed as refused
    second.close()
