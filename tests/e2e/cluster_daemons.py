"""The daemon processes of one test cluster, by name ("munged", "slurmctld", "slurmd.c1", ...).

Each runs in the foreground in its own session, its output in ``log_dir/<name>.out``, and is stopped by
PID; stopping also kills the job processes of the cluster that outlive their slurmd.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A daemon must not outlive a test run that was killed without running atexit handlers.
    # (The signal follows the forking *thread*: only used when started from the main thread.)
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"--- {path}: (missing)"
    return f"--- {path} (last {lines} lines):\n" + "\n".join(text.splitlines()[-lines:])


class Daemons:
    """Processes started with the cluster's environment in ``run_dir``; ``slurm_conf`` marks its jobs."""

    def __init__(self, env: dict[str, str], run_dir: Path, log_dir: Path, slurm_conf: Path) -> None:
        self.env = env
        self.run_dir = run_dir
        self.log_dir = log_dir
        self.slurm_conf = slurm_conf
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._outputs: list[IO[bytes]] = []

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 - closed in stop()
        self._outputs.append(out)
        proc = subprocess.Popen(
            args,
            env=self.env,
            cwd=self.run_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
        self.procs[name] = proc
        return proc

    def stop_one(self, name: str) -> None:
        """Stop daemon ``name`` (TERM, then KILL); the others and the jobs run on."""
        _terminate([self.procs.pop(name)], grace=10.0)

    def kill_one(self, name: str) -> None:
        """Kill daemon ``name`` at once (SIGKILL: as a crash, it saves nothing); the others run on."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        """Stop every daemon and any job process of the cluster (TERM, then KILL). Idempotent."""
        # Jobs first: a slurmstepd whose daemons are gone retries for seconds before it gives up.
        self._kill_strays()
        procs = self.procs
        self.procs = {}
        # Slurm daemons before the database and munge they report to, else they retry on shutdown.
        slurm = [n for n in procs if n.startswith(("slurmd.", "slurmctld"))]
        stages = [slurm, ["slurmdbd"], [n for n in procs if n not in slurm and n != "slurmdbd"]]
        for stage in stages:
            _terminate([procs[n] for n in stage if n in procs], grace=10.0)
        self._kill_strays()
        for out in self._outputs:
            out.close()
        self._outputs = []

    def _stray_pids(self) -> list[int]:
        """slurmstepd and job processes outlive slurmd; they carry this cluster's SLURM_CONF."""
        marker = f"SLURM_CONF={self.slurm_conf}".encode()
        pids = []
        daemons = {p.pid for p in self.procs.values()}
        me = os.getpid()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in (me, *daemons):
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            # Only job processes and their slurmstepd: a tool a test started with cluster.env is not ours.
            is_job = comm == "slurmstepd" or any(v.startswith(b"SLURM_JOB_ID=") for v in environ)
            if is_job and marker in environ:
                pids.append(int(entry.name))
        return pids

    def _kill_strays(self) -> None:
        # The cluster is going away: no job needs a graceful end.
        deadline = time.monotonic() + 5.0
        while (pids := self._stray_pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)


def _terminate(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM all, wait up to ``grace`` seconds together, then SIGKILL the rest."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=5)
