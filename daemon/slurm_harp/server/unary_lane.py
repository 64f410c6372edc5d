"""One unary method answered in grpcio's polling thread, with no hand-off to a worker pool.

grpcio's server takes each call in its polling thread, then hands it to a ThreadPoolExecutor
thread, which starts the receive, waits on a condition for the polling thread to deliver the
message, runs the handler, and waits again for each send: several thread switches per call, each
costly under the GIL (docs/benchmarks.md, "The Predict lane"). Predict is a short, CPU-bound,
unary call, so the lane registers it with grpc core and answers it where the polling thread takes
it: take the call, receive the message, run the handler, send metadata, message and status in one
batch. The protocol is grpc core's, unchanged (HTTP/2, trailers, deadlines, GOAWAY); every other
method of the server keeps grpcio's own path.

The lane's requests and batches go on the server's own completion queue, tagged with callables:
grpcio's polling thread calls a tag with its event, as it does its own (``rpc_state, callbacks =
event.tag(event)``). So one thread polls grpc core and does every call's socket I/O; a lane polling
a queue of its own in a second thread was slower, core often doing a call's I/O in the other thread
and then waking the lane's. A tag must never raise: that would end grpcio's polling thread.

grpcio stops polling, and destroys the core server, once its ``rpc_states`` and ``due`` are empty
after the shutdown event, whatever else is still to come on the queue (core may put a call's last
events after that one). So each request and each call of the lane is in ``rpc_states`` until its
last event, which returns it for grpcio to remove; and the lane asks for calls under grpcio's lock,
checking its stage, as grpcio does: core checks for a shutdown and then queues a request, and a
request queued after the shutdown was published would stay queued in a server being destroyed
(tests/integration/test_unary_lane.py, the stops).

This reaches into grpcio's Cython layer (``grpc._cython.cygrpc``) and its server's state, which are
not a public API: ``attach`` returns None, with a warning, when the pinned grpcio no longer offers
what it needs, and the daemon then serves Predict through the worker pool as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

try:
    from grpc import _server as grpc_server
    from grpc._cython import cygrpc  # type: ignore[attr-defined]

    _STARTED = grpc_server._ServerStage.STARTED
    _STOPPED = grpc_server._ServerStage.STOPPED
except (ImportError, AttributeError):  # pragma: no cover - a grpcio without them
    cygrpc = None

_NO_FLAGS = 0
_STATE = (
    "completion_queue",
    "registered_method_handlers",
    "lock",
    "stage",
    "rpc_states",
    "termination_event",
)


class UnaryLane:
    """Serve ``method`` (``/package.Service/Method``) of ``server`` with ``handler(request bytes)
    -> response bytes`` in the server's polling thread. Create it with ``attach`` before the server
    starts, then ``start`` it after ``server.start()``; it ends by itself when the server stops
    (after its open calls are answered), and the server's stop waits for its last events. ``after``,
    if given, is called once each answer is sent: for work the caller need not wait for."""

    def __init__(
        self,
        core: Any,
        state: Any,
        method: str,
        handler: Callable[[bytes], bytes],
        after: Callable[[], None] | None = None,
    ) -> None:
        self._core = core
        self._state = state  # grpcio's _ServerState: its queue, lock, stage and rpc_states
        self._queue = state.completion_queue
        self._method = method
        self._handler = handler
        self._after = after
        core.register_method(method)
        self._asked: object | None = None  # in rpc_states while a request is pending in core
        self._open = 0  # calls taken and not yet answered
        self._ended = threading.Event()
        self._on_call = self._take  # one bound method, not a new one per request

    @classmethod
    def attach(
        cls,
        server: grpc.Server,
        method: str,
        handler: Callable[[bytes], bytes],
        after: Callable[[], None] | None = None,
    ) -> UnaryLane | None:
        """A lane for ``method`` on a server not started yet, or None (logged) when this grpcio
        lacks the core API it needs or the server already has a handler registered for it."""
        core = getattr(server, "_cy_server", None)
        state = getattr(server, "_state", None)
        needed = ("register_method", "request_registered_call")
        if (
            cygrpc is None
            or core is None
            or state is None
            or not all(hasattr(core, n) for n in needed)
            or not all(hasattr(state, n) for n in _STATE)
        ):
            log.warning("no core lane for %s in this grpcio; the worker pool answers it", method)
            return None
        if method in state.registered_method_handlers:
            log.warning("no core lane for %s: the server already registers it", method)
            return None
        return cls(core, state, method, handler, after)

    def start(self) -> None:
        """Begin taking calls; the server must have been started (ValueError if it never was: its
        calls of this method would wait in core, unanswered). On a server stopping or stopped
        already, the lane ends at once."""
        if self._request():
            return
        if self._state.stage is _STOPPED and not self._state.termination_event.is_set():
            raise ValueError(f"{self._method}: start the lane after the server")
        self._ended.set()  # nothing was asked, nothing is open: no event will end it

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the lane to end (after the server stopped); True when it has."""
        return self._ended.wait(timeout)

    def _request(self) -> bool:
        """Ask for the next call, unless the server is stopping (then none will come); whether it
        asked."""
        asked = object()
        with self._state.lock:  # grpcio begins its shutdown under it: not in the middle of this
            if self._state.stage is not _STARTED:
                return False
            self._state.rpc_states.add(asked)
            self._asked = asked  # before the request: its call may be taken at once
            try:
                self._core.request_registered_call(self._queue, self._queue, self._method, self._on_call)
            except Exception:  # raised in grpcio's polling thread, it would end the whole server
                log.exception("%s: the lane could not ask for the next call and takes no more", self._method)
                self._state.rpc_states.discard(asked)  # still started: grpcio has not looked yet
                self._asked = None
                return False
        return True

    def _take(self, event: Any) -> tuple[object | None, tuple[()]]:
        asked, self._asked = self._asked, None
        if event.success:  # otherwise the server is shutting down: no more calls will come
            self._request()  # the next call may arrive while this one is answered
            self._receive(_Answer(self, event.call))
        self._end_when_idle()
        return asked, ()  # for grpcio to remove from rpc_states

    def _receive(self, answer: _Answer) -> None:
        receive = (cygrpc.ReceiveMessageOperation(_NO_FLAGS),)
        if _start(answer.call, receive, answer.received, self._method):
            self._open += 1
            with self._state.lock:  # its events come to this thread, after this one
                self._state.rpc_states.add(answer)

    def _received(self, answer: _Answer, event: Any) -> tuple[object | None, tuple[()]]:
        try:
            self._answer(answer, event)
        except Exception:  # the lane must outlive any one call, and so must grpcio's thread
            log.exception("%s: a call's event could not be handled", self._method)
        if self._after is not None:
            try:
                self._after()  # the answer is on its way: the client no longer waits for this
            except Exception:
                log.exception("%s: the work after an answer failed", self._method)
        self._open -= 1  # answered: what core does after the send is core's
        self._end_when_idle()
        # Sending, the answer's own event ends it in grpcio's rpc_states; else this one does.
        return (None if answer.sending else answer), ()

    def _end_when_idle(self) -> None:
        if self._asked is None and self._open == 0:
            self._ended.set()

    def _answer(self, answer: _Answer, event: Any) -> None:
        request = event.batch_operations[0].message() if event.success else None
        if request is None:
            # No message: the client half-closed without one, or the call was cancelled.
            details = f"{self._method} requires exactly one request message".encode()
            self._finish(answer, None, cygrpc.StatusCode.unimplemented, details)
            return
        try:
            response = self._handler(request)
            if not isinstance(response, bytes):  # core would refuse it later, outside this try
                raise TypeError(f"the handler answered {type(response).__name__}, not bytes")
        except Exception:
            log.exception("%s handler failed", self._method)
            self._finish(answer, None, cygrpc.StatusCode.internal, b"handler failed")
            return
        self._finish(answer, response, cygrpc.StatusCode.ok, b"")

    def _finish(self, answer: _Answer, response: bytes | None, code: Any, details: bytes) -> None:
        operations = [
            cygrpc.SendInitialMetadataOperation((), _NO_FLAGS),
            cygrpc.ReceiveCloseOnServerOperation(_NO_FLAGS),
        ]
        if response is not None:
            operations.append(cygrpc.SendMessageOperation(response, _NO_FLAGS))
        operations.append(cygrpc.SendStatusFromServerOperation((), code, details, _NO_FLAGS))
        answer.sending = _start(answer.call, operations, answer, self._method)


class _Answer:
    """One call of the lane, from its taking to its answer's last event: in grpcio's rpc_states
    meanwhile, and the tag of that last event (which returns it for grpcio to remove)."""

    __slots__ = ("call", "lane", "sending")

    def __init__(self, lane: UnaryLane, call: Any) -> None:
        self.lane = lane
        self.call = call
        self.sending = False

    def received(self, event: Any) -> tuple[object | None, tuple[()]]:
        return self.lane._received(self, event)

    def __call__(self, _event: Any) -> tuple[object | None, tuple[()]]:
        return self, ()  # the answer is sent and the client's half-close seen (or the call ended)


def _start(call: Any, operations: Any, tag: Any, method: str) -> bool:
    """Start a batch on ``call``; False when core refuses it, so that no event will come for it."""
    try:
        error = call.start_server_batch(operations, tag)
    except Exception:  # a call core already ended
        log.debug("%s: a call that ended", method, exc_info=True)
        return False
    if error != cygrpc.CallError.ok:  # (grpcio keeps a reference to the tag then: a rare leak)
        log.debug("%s: core refused a batch: %s", method, error)
        return False
    return True
