"""`server.grace_seconds`: on SIGTERM (`harp serve` calls ``Daemon.stop()``) a call in flight may
finish this long, and a longer one is cut off then, in the Predict lane as in the worker pool. The
lane answers in grpcio's polling thread, so a handler still running at the end of the grace holds
the stop until it returns (a decision takes well under a millisecond); its answer is not sent."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Decision
from slurm_harp.core.request import JobRequest
from slurm_harp.server.daemon import Daemon
from tests.integration.harp_client import Client
from tests.integration.test_daemon import make_daemon

pytestmark = pytest.mark.alone  # times itself against the wall clock (scripts/test)


def slow_daemon(
    tmp: Path, store: Path, grace: float, lane: bool, seconds: float
) -> tuple[Daemon, threading.Event]:
    """A started daemon whose every decision takes ``seconds``; the event is set as one begins."""
    daemon = make_daemon(tmp, store, grace_seconds=grace, predict_lane=lane)
    daemon.start()
    begun = threading.Event()
    decide = daemon.predictor.decide

    def slow(request: JobRequest) -> Decision:
        begun.set()
        time.sleep(seconds)
        return decide(request)

    daemon.predictor.decide = slow  # type: ignore[method-assign]
    return daemon, begun


def call_then_stop(daemon: Daemon, begun: threading.Event, sock: Path) -> tuple[Future[pb.Decision], float]:
    """A Predict call made, the daemon stopped once it is in the handler: (the call, stop's seconds)."""
    with ThreadPoolExecutor(1) as pool, Client(sock) as client:
        call = pool.submit(client.predict, timeout=30, user_name="alice", time_limit_minutes=600)
        assert begun.wait(10), "the call never reached the handler"
        started = time.monotonic()
        daemon.stop()  # what SIGTERM does in `harp serve`: the configured grace
        took = time.monotonic() - started
        call.exception(timeout=30)  # wait for it within the pool's life
    return call, took


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "pool"])
def test_a_call_in_flight_finishes_within_the_grace(tmp_path: Path, store_copy: Path, lane: bool) -> None:
    daemon, begun = slow_daemon(tmp_path, store_copy, grace=5.0, lane=lane, seconds=0.5)
    call, took = call_then_stop(daemon, begun, tmp_path / "harp.sock")
    assert call.exception() is None, call.exception()
    assert took < 4.5  # stop returned once the call was answered, not at the end of the grace


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "pool"])
def test_a_call_longer_than_the_grace_is_cut_off(tmp_path: Path, store_copy: Path, lane: bool) -> None:
    daemon, begun = slow_daemon(tmp_path, store_copy, grace=0.5, lane=lane, seconds=3.0)
    call, took = call_then_stop(daemon, begun, tmp_path / "harp.sock")
    error = call.exception()
    assert isinstance(error, grpc.RpcError), error
    # The pool's stop ends at the grace; the lane's waits for the handler, not for the grace.
    assert took < (3.8 if lane else 2.5), took
    if lane:  # the handler held the stop to its end, as configuration.md says
        assert took > 2.0, took
