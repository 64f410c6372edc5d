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

This reaches into grpcio's Cython layer (``grpc._cython.cygrpc``) and its server's state, which are
not a public API: ``attach`` returns None, with a warning, when the pinned grpcio no longer offers
what it needs, and the daemon then serves Predict through the worker pool as before
(tests/integration/test_unary_lane.py).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

try:
    from grpc._cython import cygrpc  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - grpcio without its Cython core
    cygrpc = None

_NO_FLAGS = 0
# What a tag answers grpcio's polling thread: no RPC state of grpcio's to release, no callbacks.
_DONE: tuple[None, tuple[()]] = (None, ())


class UnaryLane:
    """Serve ``method`` (``/package.Service/Method``) of ``server`` with ``handler(request bytes)
    -> response bytes`` in the server's polling thread. Create it with ``attach`` before the server
    starts, then ``start`` it after ``server.start()``; it ends by itself when the server stops
    (after its open calls are answered). ``after``, if given, is called once each answer is sent:
    for work the caller need not wait for."""

    def __init__(
        self,
        core: Any,
        queue: Any,
        method: str,
        handler: Callable[[bytes], bytes],
        after: Callable[[], None] | None = None,
    ) -> None:
        self._core = core
        self._queue = queue
        self._method = method
        self._handler = handler
        self._after = after
        core.register_method(method)
        self._waiting = False  # a request for the next call is pending in core
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
        queue = getattr(state, "completion_queue", None)
        needed = ("register_method", "request_registered_call")
        if cygrpc is None or core is None or queue is None or not all(hasattr(core, n) for n in needed):
            log.warning("no core lane for %s in this grpcio; the worker pool answers it", method)
            return None
        if method in getattr(state, "registered_method_handlers", {}):
            log.warning("no core lane for %s: the server already registers it", method)
            return None
        return cls(core, queue, method, handler, after)

    def start(self) -> None:
        """Begin taking calls; the server must be started."""
        self._waiting = True  # before the request: its call may be taken at once
        self._core.request_registered_call(self._queue, self._queue, self._method, self._on_call)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the lane to end (after the server stopped); True when it has."""
        return self._ended.wait(timeout)

    def _request(self) -> None:
        """Ask for the next call; once the server is stopping, core refuses and none will come."""
        try:
            self._core.request_registered_call(self._queue, self._queue, self._method, self._on_call)
        except ValueError:  # "server must be started and not shutting down"
            self._waiting = False
        except Exception:  # raised in grpcio's polling thread, it would end the whole server
            log.exception("%s: the lane could not ask for the next call and takes no more", self._method)
            self._waiting = False

    def _take(self, event: Any) -> tuple[None, tuple[()]]:
        self._waiting = False
        if event.success:  # otherwise the server is shutting down: no more calls will come
            self._open += 1
            self._waiting = True
            self._request()  # the next call may arrive while this one is answered
            try:
                receive = (cygrpc.ReceiveMessageOperation(_NO_FLAGS),)
                event.call.start_server_batch(receive, functools.partial(self._received, event.call))
            except Exception:  # a call core already ended: nothing will complete for it
                log.debug("%s: could not read a call that ended", self._method, exc_info=True)
                self._open -= 1
        self._end_when_idle()
        return _DONE

    def _received(self, call: Any, event: Any) -> tuple[None, tuple[()]]:
        try:
            self._answer(call, event)
        except Exception:  # the lane must outlive any one call, and so must grpcio's thread
            log.exception("%s: a call's event could not be handled", self._method)
        if self._after is not None:
            try:
                self._after()  # the answer is on its way: the client no longer waits for this
            except Exception:
                log.exception("%s: the work after an answer failed", self._method)
        self._open -= 1  # answered: what core does after the send is core's
        self._end_when_idle()
        return _DONE

    def _end_when_idle(self) -> None:
        if not self._waiting and self._open == 0:
            self._ended.set()

    def _answer(self, call: Any, event: Any) -> None:
        request = event.batch_operations[0].message() if event.success else None
        if request is None:
            # No message: the client half-closed without one, or the call was cancelled.
            details = f"{self._method} requires exactly one request message".encode()
            self._finish(call, None, cygrpc.StatusCode.unimplemented, details)
            return
        try:
            response = self._handler(request)
            if not isinstance(response, bytes):  # core would refuse it later, outside this try
                raise TypeError(f"the handler answered {type(response).__name__}, not bytes")
        except Exception:
            log.exception("%s handler failed", self._method)
            self._finish(call, None, cygrpc.StatusCode.internal, b"handler failed")
            return
        self._finish(call, response, cygrpc.StatusCode.ok, b"")

    def _finish(self, call: Any, response: bytes | None, code: Any, details: bytes) -> None:
        operations = [
            cygrpc.SendInitialMetadataOperation((), _NO_FLAGS),
            cygrpc.ReceiveCloseOnServerOperation(_NO_FLAGS),
        ]
        if response is not None:
            operations.append(cygrpc.SendMessageOperation(response, _NO_FLAGS))
        operations.append(cygrpc.SendStatusFromServerOperation((), code, details, _NO_FLAGS))
        try:
            call.start_server_batch(operations, _sent)
        except Exception:  # a call core already ended: nothing to send, nothing will complete
            log.debug("%s: could not answer a call that ended", self._method, exc_info=True)


def _sent(_event: Any) -> tuple[None, tuple[()]]:
    """The answer is sent and the client's half-close seen: nothing left to do. (Once the server
    has stopped, grpcio's thread may be gone before this event: nothing may wait for it.)"""
    return _DONE
