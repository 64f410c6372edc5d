"""The core lane (slurm_harp.server.unary_lane) against grpcio's own client, over a Unix socket.

The plugin's client against the lane is in the test_lua_grpc_*.py modules (the "lane" cases)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import _server as grpc_server

from slurm_harp.server.unary_lane import UnaryLane

SERVICE = "lane.Test"


def handle(request: bytes) -> bytes:
    if request == b"fail":
        raise RuntimeError("the handler broke")
    if request.startswith(b"sleep "):
        time.sleep(float(request[6:]))
    if request == b"thread":
        return threading.current_thread().name.encode()
    if request == b"text":
        return "not bytes"  # type: ignore[return-value]
    return request[::-1]


class Served:
    def __init__(
        self,
        sock: Path,
        handler: Callable[[bytes], bytes] = handle,
        after: Callable[[], None] | None = None,
    ) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="pool"))
        lane = UnaryLane.attach(self.server, f"/{SERVICE}/Lane", handler, after)
        assert lane is not None
        self.lane = lane
        pool = grpc.unary_unary_rpc_method_handler(lambda request, context: handler(request))
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Pool": pool, "Lane": pool}),)
        )
        self.server.add_insecure_port(f"unix:{sock}")
        self.server.start()
        self.lane.start()
        self.channel = grpc.insecure_channel(f"unix:{sock}")

    def call(self, method: str, request: bytes, timeout: float = 5.0) -> bytes:
        stub = self.channel.unary_unary(f"/{SERVICE}/{method}", None, None)
        return bytes(stub(request, timeout=timeout))

    def close(self) -> None:
        self.channel.close()
        self.server.stop(0).wait()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "lane.sock")
    yield s
    s.close()


def test_the_lane_answers_its_method_in_the_servers_polling_thread(served: Served) -> None:
    assert served.call("Lane", b"abc") == b"cba"
    # threading names a thread after its target: grpcio's polling loop is grpc._server._serve.
    polling = served.call("Lane", b"thread")
    assert polling.endswith(b"(_serve)"), f"registered in core, the lane takes it: {polling!r}"
    assert served.call("Lane", b"thread") == polling
    assert served.call("Pool", b"thread").startswith(b"pool"), "other methods keep the pool"


def test_after_runs_once_the_answer_is_sent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    answered = threading.Event()
    ran: list[str] = []

    def after() -> None:
        ran.append(threading.current_thread().name)
        if len(ran) == 1:
            answered.wait(10)  # the client has its answer before this returns, or it never would
        else:
            raise RuntimeError("the work after broke")

    served = Served(tmp_path / "lane.sock", after=after)
    try:
        # Had the answer waited for `after`, this call would run out of time.
        assert served.call("Lane", b"abc", timeout=5) == b"cba"
        answered.set()
        with caplog.at_level(logging.ERROR, logger="slurm_harp.server.unary_lane"):
            assert served.call("Lane", b"xyz") == b"zyx"
            assert served.call("Lane", b"thread").endswith(b"(_serve)"), "a failing `after` ends nothing"
    finally:
        served.close()
    assert ran[0].endswith("(_serve)"), ran
    assert len(ran) == 3, ran
    assert "the work after an answer failed" in caplog.text


def test_large_messages_both_ways(served: Served) -> None:
    request = bytes(range(256)) * 4096  # 1 MiB: many HTTP/2 frames and window updates
    assert served.call("Lane", request) == request[::-1]


def test_handler_error_is_internal_and_the_lane_goes_on(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, "slurm_harp.server.unary_lane"), pytest.raises(grpc.RpcError) as err:
        served.call("Lane", b"fail")
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "/lane.Test/Lane handler failed" in caplog.text and "the handler broke" in caplog.text
    assert served.call("Lane", b"ok") == b"ko"


def test_a_handler_answering_no_bytes_is_internal(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as err:
        served.call("Lane", b"text")
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert served.call("Lane", b"ok") == b"ko"


def test_an_error_in_the_lane_leaves_grpcios_polling_thread_serving(
    served: Served, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The lane's events run in grpcio's polling thread, which an exception would end: every
    method of the server would then go unanswered."""
    answer = UnaryLane._answer
    broken: list[bool] = []

    def fails_once(lane: UnaryLane, call: Any, event: object) -> None:
        if not broken:
            broken.append(True)
            raise RuntimeError("the lane broke")
        answer(lane, call, event)

    monkeypatch.setattr(UnaryLane, "_answer", fails_once)
    with caplog.at_level(logging.ERROR, "slurm_harp.server.unary_lane"), pytest.raises(grpc.RpcError) as err:
        served.call("Lane", b"lost", timeout=0.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "that one call is not answered"
    assert "/lane.Test/Lane: a call's event could not be handled" in caplog.text
    assert served.call("Lane", b"ok") == b"ko"
    assert served.call("Pool", b"ok") == b"ko"


def test_a_call_without_a_message_is_unimplemented(served: Served) -> None:
    stub = served.channel.stream_unary(f"/{SERVICE}/Lane", None, None)  # lets the client send no message
    with pytest.raises(grpc.RpcError) as err:
        stub(iter(()), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert err.value.details() == "/lane.Test/Lane requires exactly one request message"
    assert served.call("Lane", b"ok") == b"ko"


def test_deadline_exceeded_then_the_next_call_works(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as err:
        served.call("Lane", b"sleep 0.3", timeout=0.05)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert served.call("Lane", b"ok") == b"ko"


def test_concurrent_clients_each_get_their_own_answer(served: Served) -> None:
    def client(i: int) -> bool:
        return all(served.call("Lane", f"{i}-{n}".encode()) == f"{i}-{n}".encode()[::-1] for n in range(50))

    with futures.ThreadPoolExecutor(16) as pool:
        assert all(pool.map(client, range(16)))


def test_graceful_stop_answers_the_call_in_flight_then_the_lane_ends(served: Served) -> None:
    result: list[bytes] = []
    caller = threading.Thread(target=lambda: result.append(served.call("Lane", b"sleep 0.3")))
    caller.start()
    time.sleep(0.1)
    served.server.stop(grace=5).wait(5)
    caller.join(5)
    assert result == [b"3.0 peels"]
    assert served.lane.join(5), "the lane ends with its server"


def test_hard_stop_ends_the_lane(served: Served) -> None:
    assert served.call("Lane", b"ok") == b"ko"
    served.server.stop(None).wait(5)
    assert served.lane.join(5)


def test_attach_refuses_a_method_the_server_registers_itself(caplog: pytest.LogCaptureFixture) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    echo = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_registered_method_handlers(SERVICE, {"Lane": echo})  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, "slurm_harp.server.unary_lane"):
        assert UnaryLane.attach(server, f"/{SERVICE}/Lane", handle) is None
    assert "no core lane for /lane.Test/Lane: the server already registers it" in caplog.text


def test_attach_without_grpc_core_falls_back_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    class OtherServer:  # a grpcio whose server no longer has the Cython core under it
        pass

    with caplog.at_level(logging.WARNING, "slurm_harp.server.unary_lane"):
        assert UnaryLane.attach(OtherServer(), f"/{SERVICE}/Lane", handle) is None  # type: ignore[arg-type]
    assert "no core lane for /lane.Test/Lane in this grpcio; the worker pool answers it" in caplog.text


def test_a_call_taken_as_the_server_stops_is_still_answered(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane asks for the next call as soon as it takes one; when the server began stopping in
    between, it asks for none: the call in hand is answered all the same and the lane ends."""
    ask = UnaryLane._request
    stopped: list[threading.Event] = []

    def stop_first(lane: UnaryLane) -> None:
        stopped.append(served.server.stop(grace=5))
        ask(lane)

    monkeypatch.setattr(UnaryLane, "_request", stop_first)
    assert served.call("Lane", b"abc") == b"cba"
    assert stopped[0].wait(5)
    assert served.lane.join(5)


def test_the_server_stops_only_after_the_lanes_last_events(tmp_path: Path) -> None:
    """grpcio ends its polling thread once its own calls are done and the shutdown event is seen;
    core may put the lane's later events after that one. Here one call holds the polling thread in
    the handler while a second is taken in core and the server stops, cancelling both: the second's
    receive can only start after the shutdown event, yet the lane must see it through."""
    entered, release = threading.Event(), threading.Event()

    def holding(request: bytes) -> bytes:
        if request == b"hold":
            entered.set()
            release.wait(10)
        return handle(request)

    served = Served(tmp_path / "lane.sock", holding)
    try:
        stub = served.channel.unary_unary(f"/{SERVICE}/Lane", None, None)
        held = stub.future(b"hold", timeout=10)
        assert entered.wait(5)
        queued = stub.future(b"abc", timeout=10)
        time.sleep(0.3)  # the second call reaches core, which hands it to the lane's request
        stopped = served.server.stop(0)
        time.sleep(0.3)  # core cancels both calls and reports the shutdown
        release.set()
        assert stopped.wait(5)
        assert served.lane.join(0), "the server stopped with a call of the lane still open"
        for call in (held, queued):
            with pytest.raises(grpc.RpcError):  # cancelled by the stop
                call.result(timeout=5)
    finally:
        release.set()
        served.close()


def test_a_stop_waits_for_the_request_the_lane_is_making(served: Served) -> None:
    """Core checks for a shutdown, then queues a request: a request queued once the shutdown is
    published would never be failed, and core aborts when the server goes with it queued. grpcio
    asks for its own calls and begins its shutdown under its lock; the lane must ask under it too.
    Here the lane's request is slow, and the server is stopped from another thread meanwhile."""
    core = served.lane._core
    stages: list[object] = []
    stopped: list[threading.Event] = []
    stopper = threading.Thread(target=lambda: stopped.append(served.server.stop(grace=5)))

    class SlowCore:
        def request_registered_call(self, *args: object) -> object:
            stopper.start()
            time.sleep(0.3)  # core's check done, its queueing not yet
            stages.append(served.server._state.stage)  # type: ignore[attr-defined]
            return core.request_registered_call(*args)

    served.lane._core = SlowCore()
    assert served.call("Lane", b"abc") == b"cba"
    stopper.join(5)  # it may still be on its way from grpcio's lock to its return
    assert stopped and stopped[0].wait(5)
    assert stages == [grpc_server._ServerStage.STARTED], "the stop began during the lane's request"
    assert served.lane.join(5)


def test_a_lane_started_after_its_server_stopped_ends(tmp_path: Path) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    lane = UnaryLane.attach(server, f"/{SERVICE}/Lane", handle)
    assert lane is not None
    server.add_insecure_port(f"unix:{tmp_path / 'lane.sock'}")
    server.start()
    server.stop(None).wait(5)
    lane.start()
    assert lane.join(0)


def test_a_lane_started_before_its_server_is_refused(tmp_path: Path) -> None:
    # Its method is registered in core: its calls would wait there unanswered, every one to its deadline.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    lane = UnaryLane.attach(server, f"/{SERVICE}/Lane", handle)
    assert lane is not None
    server.add_insecure_port(f"unix:{tmp_path / 'lane.sock'}")
    with pytest.raises(ValueError, match="after the server"):
        lane.start()
    assert not lane.join(0)
    server.start()
    server.stop(None).wait(5)
