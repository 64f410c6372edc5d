"""A gRPC Predictor server that answers an empty Decision without any work: the benchmarks' baseline.

    python -m benchmarks.noop_server SOCKET [--grpcio-defaults] [--aio | --core-loop | --lane]
        [--reply HEX]

A process of its own (started by the benchmarks), so that grpcio reads its core settings here: by
default the daemon's (slurm_harp.server.grpc_core, set before grpc is imported, as `harp serve`
does); --grpcio-defaults leaves grpcio's own. --aio: grpc.aio's server (the handler runs on the
event loop) instead of the thread-pool server the daemon runs. --core-loop: an experiment, grpc
core's completion queue driven by one Python thread through grpcio's private cygrpc layer (what
grpc.Server does underneath, without its thread pool and hand-offs): real gRPC on the wire, every
method answered with an empty message. --lane: the daemon's server, Predict answered in its core
lane (slurm_harp.server.unary_lane). --reply: with --lane, answer these Decision bytes (hex) instead
of an empty Decision, without reading the request (what the daemon answered, without its work).
Serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from slurm_harp.server import grpc_core

GRPCIO_DEFAULTS = "--grpcio-defaults"
AIO = "--aio"
CORE_LOOP = "--core-loop"
LANE = "--lane"
REPLY = "--reply"


def serve_core_loop(sock: str, stop: threading.Event) -> None:
    """One thread takes each new call, asks for its message and, when it is there, answers it with
    initial metadata, the message and an OK status in one batch."""
    from grpc._cython import cygrpc  # type: ignore[attr-defined]

    queue = cygrpc.CompletionQueue()
    server = cygrpc.Server((), False)
    server.register_completion_queue(queue)
    server.add_http2_port(f"unix:{sock}".encode())
    server.start()
    new_call = object()
    server.request_call(queue, queue, new_call)

    def loop() -> None:
        while True:
            event = queue.poll()
            if event.tag is new_call:
                server.request_call(queue, queue, new_call)
                if event.success:
                    call = event.call
                    call.start_server_batch((cygrpc.ReceiveMessageOperation(0),), call)
            elif isinstance(event.tag, cygrpc.Call):
                answer = (
                    cygrpc.SendInitialMetadataOperation((), 0),
                    cygrpc.SendMessageOperation(b"", 0),
                    cygrpc.SendStatusFromServerOperation((), cygrpc.StatusCode.ok, b"", 0),
                    cygrpc.ReceiveCloseOnServerOperation(0),
                )
                event.tag.start_server_batch(answer, None)

    threading.Thread(target=loop, daemon=True).start()
    stop.wait()


def main(argv: list[str]) -> None:
    if GRPCIO_DEFAULTS not in argv:
        grpc_core.configure()
    from concurrent import futures

    import grpc

    from slurm_harp.api import predictor_pb2 as pb
    from slurm_harp.api import predictor_pb2_grpc as pb_grpc

    class NoopService(pb_grpc.PredictorServicer):
        def Predict(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Decision:
            return pb.Decision()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if CORE_LOOP in argv:
        serve_core_loop(argv[0], stop)
        return
    if AIO in argv:

        async def serve_aio() -> None:
            server = grpc.aio.server()
            pb_grpc.add_PredictorServicer_to_server(NoopService(), server)
            server.add_insecure_port(f"unix:{argv[0]}")
            await server.start()
            await asyncio.to_thread(stop.wait)
            await server.stop(0)

        asyncio.run(serve_aio())
        return
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    lane = None
    if LANE in argv:
        from slurm_harp.server.service import PREDICT, SERVICE
        from slurm_harp.server.unary_lane import UnaryLane

        answer = bytes(pb.Decision().SerializeToString())
        if REPLY in argv:
            answer = bytes.fromhex(argv[argv.index(REPLY) + 1])
        lane = UnaryLane.attach(server, PREDICT, lambda _request: answer)
        # A generic handler, as the daemon's: a registered one would take Predict from the lane.
        method = grpc.unary_unary_rpc_method_handler(lambda _request, _context: answer)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Predict": method}),))
    else:
        pb_grpc.add_PredictorServicer_to_server(NoopService(), server)
    server.add_insecure_port(f"unix:{argv[0]}")
    server.start()
    if lane is not None:
        lane.start()
    stop.wait()
    server.stop(0).wait()


class NoopServer:
    """The no-op server as a subprocess on ``sock``: ``with NoopServer(sock):``."""

    def __init__(
        self, sock: Path, grpcio_defaults: bool = False, kind: str = "", reply: bytes | None = None
    ) -> None:
        """kind: "" (the daemon's thread-pool server), AIO, CORE_LOOP or LANE; reply: with LANE,
        the Decision bytes to answer."""
        self.sock = sock
        self.args = [sys.executable, "-m", "benchmarks.noop_server", str(sock)]
        self.args += [GRPCIO_DEFAULTS] if grpcio_defaults else []
        self.args += [kind] if kind else []
        self.args += [REPLY, reply.hex()] if reply is not None else []
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> NoopServer:
        env = dict(os.environ)
        env.pop("GRPC_EXPERIMENTS", None)  # this benchmark's choice, not the caller's
        self.proc = subprocess.Popen(self.args, env=env)
        while not self.sock.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"no-op server exited with {self.proc.returncode}")
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        self.sock.unlink(missing_ok=True)


if __name__ == "__main__":
    main(sys.argv[1:])
