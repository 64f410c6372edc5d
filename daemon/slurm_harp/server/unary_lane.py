"""One unary method answered in grpc core's polling thread, with no hand-off to a worker pool.

grpcio's server takes each call in its polling thread, then hands it to a ThreadPoolExecutor
thread, which starts the receive, waits on a condition for the polling thread to deliver the
message, runs the handler, and waits again for each send: several thread switches per call, each
costly under the GIL (docs/benchmarks.md, "The Predict lane"). Predict is a short, CPU-bound,
unary call, so the lane registers it with grpc core on a completion queue of its own and answers
it in one thread: take the call, receive the message, run the handler, send metadata, message and
status in one batch. The protocol is grpc core's, unchanged (HTTP/2, trailers, deadlines, GOAWAY);
every other method of the server keeps grpcio's own path.

This reaches into grpcio's Cython layer (``grpc._cython.cygrpc``), which is not a public API:
``attach`` returns None, with a warning, when the pinned grpcio no longer offers what it needs, and
the daemon then serves Predict through the worker pool as before (tests/integration/test_unary_lane.py).
"""

from __future__ import annotations

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

_REQUEST = "request"  # the tag of the pending request for the next call
_NO_FLAGS = 0


class UnaryLane:
    """Serve ``method`` (``/package.Service/Method``) of ``server`` with ``handler(request bytes)
    -> response bytes``, in a thread named ``harp-lane``. Create it with ``attach`` before the
    server starts, then ``start`` it after ``server.start()``; it ends by itself when the server
    stops (after its open calls are answered)."""

    def __init__(self, core: Any, method: str, handler: Callable[[bytes], bytes]) -> None:
        self._core = core
        self._method = method
        self._handler = handler
        self._queue = cygrpc.CompletionQueue()
        core.register_completion_queue(self._queue)
        core.register_method(method)
        self._open = 0  # calls taken and not yet closed
        self._stopping = False
        self._thread = threading.Thread(target=self._serve, name="harp-lane", daemon=True)

    @classmethod
    def attach(cls, server: grpc.Server, method: str, handler: Callable[[bytes], bytes]) -> UnaryLane | None:
        """A lane for ``method`` on a server not started yet, or None (logged) when this grpcio
        lacks the core API it needs or the server already has a handler registered for it."""
        core = getattr(server, "_cy_server", None)
        state = getattr(server, "_state", None)
        needed = ("register_completion_queue", "register_method", "request_registered_call")
        if cygrpc is None or core is None or not all(hasattr(core, name) for name in needed):
            log.warning("no core lane for %s in this grpcio; the worker pool answers it", method)
            return None
        if method in getattr(state, "registered_method_handlers", {}):
            log.warning("no core lane for %s: the server already registers it", method)
            return None
        return cls(core, method, handler)

    def start(self) -> None:
        """Begin taking calls; the server must be started."""
        self._core.request_registered_call(self._queue, self._queue, self._method, _REQUEST)
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the lane to end (after the server stopped); True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _request(self) -> None:
        """Ask for the next call; once the server is stopping, core refuses and none will come."""
        try:
            self._core.request_registered_call(self._queue, self._queue, self._method, _REQUEST)
        except ValueError:  # "server must be started and not shutting down"
            self._stopping = True

    def _serve(self) -> None:
        while True:
            event = self._queue.poll()
            kind = event.completion_type
            if kind == cygrpc.CompletionType.queue_shutdown:
                return
            if kind != cygrpc.CompletionType.operation_complete:
                continue  # a poll timeout: nothing happened
            try:
                self._dispatch(event)
            except Exception:  # the lane must outlive any one call: a dead lane answers nobody
                log.exception("%s: a call's event could not be handled", self._method)
            if self._stopping and self._open == 0:
                self._queue.shutdown()

    def _dispatch(self, event: Any) -> None:
        if event.tag == _REQUEST:
            self._take(event)
            return
        step, call = event.tag
        if step == "received":
            self._answer(call, event)
        else:  # "closed": the answer is sent and the client's half-close seen
            self._open -= 1

    def _take(self, event: Any) -> None:
        if not event.success:  # the server is shutting down: no more calls will come
            self._stopping = True
            return
        self._open += 1
        self._request()  # the next call may arrive while this one is answered
        call = event.call
        try:
            call.start_server_batch((cygrpc.ReceiveMessageOperation(_NO_FLAGS),), ("received", call))
        except Exception:  # a call core already ended: nothing will complete for it
            log.debug("%s: could not read a call that ended", self._method, exc_info=True)
            self._open -= 1

    def _answer(self, call: Any, event: Any) -> None:
        request = event.batch_operations[0].message() if event.success else None
        if request is None:
            # No message: the client half-closed without one, or the call was cancelled.
            details = f"{self._method} requires exactly one request message".encode()
            self._finish(call, None, cygrpc.StatusCode.unimplemented, details)
            return
        try:
            response = self._handler(request)
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
            call.start_server_batch(operations, ("closed", call))
        except Exception:  # a call core already ended: nothing to send, nothing will complete
            log.debug("%s: could not answer a call that ended", self._method, exc_info=True)
            self._open -= 1
