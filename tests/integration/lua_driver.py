"""The Lua driver: the plugin's gRPC client (tests/lua/drive_grpc.lua under lua5.1) driven from Python,
one JSON command per line, for test_lua_grpc.py and the conformance modules (test_lua_grpc_*.py).

Importing this module needs no Lua, so the conftest can import Driver for its ``driver`` fixture. A
module that drives Lua calls ``lua_or_skip()`` at its top: where lua5.1 or a Lua library the driver
loads is missing, that module is skipped naming the packages (in CI it is an error), and the rest of
tests/integration runs.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, lua51, lua_required

DRIVER = REPO / "tests" / "lua" / "drive_grpc.lua"
# The Lua libraries that drive_grpc.lua loads (cjson; harp.h2 loads the other two), by Debian package.
DRIVER_LIBRARIES = {"cjson": "lua-cjson", "socket.unix": "lua-socket", "http.hpack": "lua-http"}

DEADLINE_MS = 50  # the plugin's, in production: for the tests about deadlines
# A busy machine adds tens of ms to a call's wall time: time the client (or the test process serving
# it) sat runnable, waiting for a CPU. Bounds on the client's time are checked on what the driver
# takes that off (Linux's schedstat; where it is missing, nothing is): own_ms, the client's work and
# waits (with `peers`, less the server's waits for a CPU too); late_ms, its work and waits past its
# deadline. SLACK_MS: past a deadline, the client's last piece of work and the kernel's timer slack.
SLACK_MS = 25
# For every other call: a call past its deadline fails and drops its connection by design, and a
# loaded machine overruns 50 ms, and now and then 500 ms, where the test checks something else.
ROOMY_MS = 5000
PLUGIN_ROOMY_MS = 1000  # the same for the whole plugin: the longest deadline_ms job_submit.lua takes

JOB_DESC: dict[str, Any] = {
    "user_name": "alice",
    "user_id": 1000,
    "name": "train",
    "partition": "batch",
    "account": "physics",
    "work_dir": "/home/alice",
    "time_limit": 120,
    "time_min": 4294967294,
    "min_mem_per_node": 4000,
    "min_cpus": 4,
    "cpus_per_task": 4,
    "num_tasks": 1,
    "min_nodes": 1,
    "tres_per_node": "gres:gpu:a100:2",
    "script": "#!/bin/bash\n#SBATCH -t 120\nsrun ./train\n",
}


def serving_threads() -> list[str]:
    """The schedstat files of this process's threads, for the driver's `peers`: the servers and
    scripted peers the tests talk to are threads of the test process."""
    tasks = Path(f"/proc/{os.getpid()}/task")
    return [str(tasks / tid / "schedstat") for tid in os.listdir(tasks)] if tasks.is_dir() else []


@functools.cache
def lua_or_skip() -> str:
    """The lua5.1 interpreter, with the driver's Lua libraries: where either is missing, the calling
    module is skipped naming the packages (in CI that is an error, as in lua51())."""
    lua = lua51()
    probe = "".join(f"if not pcall(require, '{name}') then print('{name}') end " for name in DRIVER_LIBRARIES)
    missing = subprocess.run([lua, "-e", probe], capture_output=True, text=True, check=True).stdout.split()
    if missing:
        packages = " ".join(DRIVER_LIBRARIES[name] for name in missing)
        message = f"lua5.1 cannot load {', '.join(missing)} (apt install {packages})"
        if lua_required():
            raise RuntimeError(f"{message}: required in CI")
        pytest.skip(message, allow_module_level=True)
    return lua


class Driver:
    """tests/lua/drive_grpc.lua: one JSON command per line in, one JSON result per line out."""

    def __init__(self, sock: Path, entry: Path | None = None, env: dict[str, str] | None = None) -> None:
        args = [lua_or_skip(), str(DRIVER), str(sock)] + ([str(entry)] if entry else [])
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, **env} if env else None,
        )
        self.sel = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)

    def __call__(self, op: str, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        if not self.sel.select(timeout):
            raise AssertionError(f"driver gave no answer to {op} within {timeout} s")
        line = self.proc.stdout.readline()
        assert line, f"driver exited with {self.proc.wait()}"
        result: dict[str, Any] = json.loads(line)
        return result

    def call(self, **args: Any) -> dict[str, Any]:
        args.setdefault("job_desc", JOB_DESC)
        args.setdefault("deadline_ms", ROOMY_MS)
        return self("call", **args)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
