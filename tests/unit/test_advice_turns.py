"""Turns at computing advice (server/advice_turns.py): one call per uid, the uid served least
recently first, and a call whose client left is dropped, not computed."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from slurm_harp.server.advice_turns import NoTurn, Turns

WAIT = 5.0  # seconds: only a failing test waits this long


class Call:
    """A call in its own thread: waits for its turn, notes it, then holds it until ``done``."""

    def __init__(self, turns: Turns, uid: int, order: list[int], timeout: float | None = WAIT) -> None:
        self.uid, self.left, self.done = uid, threading.Event(), threading.Event()
        self.started, self.refused = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(turns, order, timeout), daemon=True)
        self._thread.start()

    def _run(self, turns: Turns, order: list[int], timeout: float | None) -> None:
        try:
            with turns.turn(self.uid, timeout, self.left):
                order.append(self.uid)
                self.started.set()
                self.done.wait(WAIT)
        except NoTurn:
            self.refused.set()

    def finish(self) -> None:
        self.done.set()
        self._thread.join(WAIT)


def queued(turns: Turns, count: int) -> None:
    """Until ``count`` calls wait in ``turns``."""
    with turns._changed:
        assert turns._changed.wait_for(lambda: len(turns._waiting) == count, WAIT)


@pytest.fixture
def order() -> Iterator[list[int]]:
    yield []


def test_a_uid_computes_one_call_at_a_time_though_a_turn_is_free(order: list[int]) -> None:
    turns = Turns(at_once=2)
    first = Call(turns, 7, order)
    assert first.started.wait(WAIT)
    second = Call(turns, 7, order)
    queued(turns, 1)
    assert not second.started.is_set()
    first.finish()
    assert second.started.wait(WAIT)
    second.finish()


def test_a_free_turn_goes_to_the_uid_served_least_recently(order: list[int]) -> None:
    turns = Turns(at_once=1)
    heavy = Call(turns, 7, order)
    assert heavy.started.wait(WAIT)
    again = [Call(turns, 7, order) for _ in range(3)]  # uid 7's other calls, queued first
    queued(turns, 3)
    other = Call(turns, 8, order)
    queued(turns, 4)
    heavy.finish()
    assert other.started.wait(WAIT)  # uid 8 never had a turn: before uid 7's next call
    other.finish()
    for call in again:
        assert call.started.wait(WAIT)
        call.finish()
    assert order == [7, 8, 7, 7, 7]


def test_a_call_whose_client_left_or_whose_time_ran_out_is_not_computed(order: list[int]) -> None:
    turns = Turns(at_once=1)
    holder = Call(turns, 7, order)
    assert holder.started.wait(WAIT)
    gone, late = Call(turns, 8, order), Call(turns, 9, order, timeout=0.05)
    assert late.refused.wait(WAIT)
    queued(turns, 1)
    gone.left.set()
    turns.wake()
    assert gone.refused.wait(WAIT)
    holder.finish()
    assert order == [7] and turns._busy == set() and turns._last_turn == {}  # nothing kept
