"""The real `harp serve` as a subprocess, and misbehaving stand-ins, for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from tests.integration.harp_client import Client

if TYPE_CHECKING:
    from tests.e2e.cluster import SlurmCluster


def plugin_config(work: Path, deadline_ms: int, breaker_seconds: int) -> str:
    """harp_plugin.lua for a test site in ``work``: our plugin's modules from the repository, the
    daemon's socket and the switch file in ``work``."""
    from tests.conftest import REPO

    return (
        f'return {{ lib_dir = "{REPO / "plugin"}", socket = "{work / "harp.sock"}", '
        f"deadline_ms = {deadline_ms}, breaker_seconds = {breaker_seconds}, "
        f'disable_file = "{work / "harp.disable"}" }}\n'
    )


@contextlib.contextmanager
def plugin_deadline(
    cluster: SlurmCluster, work: Path, deadline_ms: int, breaker_seconds: int
) -> Iterator[None]:
    """The plugin at ``deadline_ms`` for the block, then with its harp_plugin.lua of before. The
    plugin reads that file as slurmctld loads job_submit.lua, which it does again at the next
    submission once the script's mtime has grown (write_job_submit)."""
    conf = cluster.conf_dir / "harp_plugin.lua"
    saved, entry = conf.read_text(), (cluster.conf_dir / "job_submit.lua").read_text()
    conf.write_text(plugin_config(work, deadline_ms, breaker_seconds))
    cluster.write_job_submit(entry)
    try:
        yield
    finally:
        conf.write_text(saved)
        cluster.write_job_submit(entry)


class DaemonProcess:
    """`harp serve --config` in its own process, so it can be stopped, hung (SIGSTOP) or reloaded."""

    def __init__(
        self,
        workdir: Path,
        store: Path,
        mode: str = "shadow",
        extra: str = "",
        server_extra: str = "",
        env: dict[str, str] | None = None,
        module: str = "slurm_harp.cli",
    ) -> None:
        """``env``: the daemon's environment (a cluster's, for the scontrol the advice runs);
        ``module``: what runs `serve` (a benchmark's instrumented command line)."""
        self.workdir = workdir
        self.env = env
        self.module = module
        self.socket = workdir / "harp.sock"
        self.config = workdir / "harp.toml"
        self.log = workdir / "daemon.log"
        self.store = store
        self.server_extra = server_extra  # more [server] keys, one per line
        self.write_config(mode, extra)
        self.proc: subprocess.Popen[bytes] | None = None

    def write_config(self, mode: str, extra: str = "") -> None:
        self.config.write_text(
            f'[server]\nsocket = "{self.socket}"\nstore_poll_seconds = 3600\n{self.server_extra}'
            f'[store]\npath = "{self.store}"\n'
            f'[policy]\nmode = "{mode}"\n{extra}'
        )

    def start(self, timeout: float = 30) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "serve", "--config", str(self.config)],
                stdout=log,
                stderr=log,
                env=self.env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"harp serve exited: {self.log.read_text()[-2000:]}")
            if self.socket.exists():
                with Client(self.socket) as client:
                    try:
                        if client.status() == "SERVING":
                            return
                    except grpc.RpcError:
                        pass
            time.sleep(0.05)
        raise RuntimeError(f"harp serve not SERVING: {self.log.read_text()[-2000:]}")

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def advice_pids(self) -> list[int]:
        """The daemon's advice process (server.advice_child), which serves its [advice] socket."""
        assert self.proc is not None
        found = []
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except (OSError, ValueError):
                continue  # not a process, or gone
            ppid = int(stat.rpartition(")")[2].split()[1])
            if ppid == self.proc.pid and b"slurm_harp.server.advice_child" in cmdline:
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        if self.proc is None:
            return
        for pid in [self.proc.pid, *self.advice_pids()]:  # a hung (stopped) one cannot act on SIGTERM
            os.kill(pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class GarbageGrpcServer:
    """A real gRPC server on the daemon's socket that answers Predict with bytes that are no Decision."""

    def __init__(self, sock: Path, payload: bytes = b"\xff\xfe\x07garbage\x00\x01" * 8) -> None:
        def predict(_request: bytes, _context: grpc.ServicerContext) -> bytes:
            return payload

        handler = grpc.method_handlers_generic_handler(
            "harp.v1.Predictor",
            {"Predict": grpc.unary_unary_rpc_method_handler(predict)},  # identity (de)serializers
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port(f"unix:{sock}")
        self.sock = sock

    def __enter__(self) -> GarbageGrpcServer:
        self.server.start()
        os.chmod(self.sock, 0o666)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(0).wait()


class GarbageSocketServer:
    """Not gRPC at all: accepts on the socket, writes noise, and closes."""

    def __init__(self, sock: Path) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(sock))
        self.listener.listen(16)
        self.listener.settimeout(0.2)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 500 nonsense\r\n\r\n" + os.urandom(256))

    def __enter__(self) -> GarbageSocketServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()
        self.listener.close()
