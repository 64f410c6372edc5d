"""Benchmark: where a submission's time goes inside a real slurmctld, phase by phase.

    .venv/bin/python -m benchmarks.bench_plugin_phases [--jobs 500] [--plugin DIR]

bench_plugin measures what the plugin adds per submission; this one splits it. The plugin's
modules are wrapped, in slurmctld's Lua, by timers around building the request, encoding it, the
gRPC call, decoding the answer, planning and committing the changes ("other" is the rest: the
disable switch, the breaker, the log line). The daemon runs with its Predict call timed phase by
phase (benchmarks.phased_serve): parsing the request, its features, the calibrated rule with its
models, policy and messages, the reply; "transport" is the gRPC call as the plugin saw it minus
the daemon's handler, call by call; "after" is what the daemon does once the answer is sent
(counting it), which no submission waits for. The same variants as bench_plugin: a no-op server
(the transport's floor), the daemon with a 3-day, a 1-hour and a 7-day job (the one the plugin
rewrites), and a no-op server answering the daemon's decision ("canned decision"). The timers cost
about a microsecond per phase: compare phases, and take whole costs from bench_plugin. Needs root
and Slurm, as bench_plugin.

--plugin DIR: the plugin of another checkout (its plugin/ directory, e.g. from `git archive main
plugin | tar -x`) instead of this one's, with this checkout's daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from benchmarks.bench_plugin import (
    BENCH_JOB,
    LONG_SCRIPT,
    NOOP,
    REWRITE_DEBUG,
    SCRIPT,
    SHORT_SCRIPT,
    WARMUP,
    WRAPPER,
    pct,
    plugin_conf,
    point,
    submit_held,
)
from benchmarks.common import train_bundled
from benchmarks.noop_server import LANE, NoopServer
from benchmarks.phased_serve import ENV
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster
from tests.e2e.daemon_process import DaemonProcess
from tests.integration.harp_client import Client

LUA_PHASES = ("build", "encode", "call", "decode", "plan", "commit")
# After the plugin is loaded: its modules' functions are looked up at each call, so wrapping them
# in their module tables times them without changing the plugin.
PHASED = """
local clock = require("cqueues").monotime
dofile("{conf_dir}/harp_entry.lua")
local spent = {{}}
local function timed(mod, name, phase)
  local inner = mod[name]
  mod[name] = function(...)
    local t0 = clock()
    local a, b = inner(...)
    spent[phase] = (spent[phase] or 0) + clock() - t0
    return a, b
  end
end
timed(require "harp.request", "build", "build")
timed(require "harp.pb", "encode_request", "encode")
timed(require "harp.grpc", "call", "call")
timed(require "harp.pb", "decode_decision", "decode")
timed(require "harp.apply", "plan", "plan")
timed(require "harp.apply", "commit", "commit")
local inner = slurm_job_submit
function slurm_job_submit(job_desc, part_list, submit_uid)
  for k in pairs(spent) do spent[k] = nil end
  local t0 = clock()
  local rc = inner(job_desc, part_list, submit_uid)
  local total = clock() - t0
  local parts = {{}}
  for k, v in pairs(spent) do parts[#parts + 1] = k .. "=" .. math.floor(v * 1e6 + 0.5) end
  slurm.log_info("bench plugin_us=%d phases %s", math.floor(total * 1e6 + 0.5), table.concat(parts, ","))
  return rc
end
"""
DAEMON_PHASES = ("parse", "features", "rule", "policy and messages", "reply", "handler", "after")


def run(cluster: SlurmCluster, jobs: int, script: str) -> list[dict[str, float]]:
    """``jobs`` held submissions; each one's plugin phases in µs, warm-up left out."""
    _, log = submit_held(cluster, jobs, script)
    rows = []
    for line in log.splitlines():
        if "bench plugin_us=" not in line:
            continue
        total, _, parts = line.split("bench plugin_us=")[1].partition(" phases ")
        row = {k: float(v) for k, v in (p.split("=") for p in parts.split(",") if p)}
        row["total"] = float(total)
        row["other"] = row["total"] - sum(row.get(k, 0.0) for k in LUA_PHASES)
        rows.append(row)
    assert len(rows) == jobs, f"{len(rows)} timings for {jobs} jobs"
    return rows[WARMUP:]


def p50s(rows: list[dict[str, float]], names: tuple[str, ...]) -> list[float]:
    return [pct([r.get(n, 0.0) for r in rows], 50) for n in names]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--plugin", type=Path, default=REPO / "plugin", help="a checkout's plugin/ directory")
    args = ap.parse_args()
    lib = args.plugin.absolute()
    plugin: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="harp-bench-") as tmp:
        work = Path(tmp)
        store = work / "store"
        train_bundled(store)
        (work / "d").mkdir()
        phases_file = work / "phases.jsonl"
        daemon = DaemonProcess(
            work / "d",
            store,
            mode="shadow",
            extra=REWRITE_DEBUG,
            env={**os.environ, ENV: str(phases_file)},
            module="benchmarks.phased_serve",
        )
        sock = work / "harp.sock"
        cluster = SlurmCluster(
            work / "c",
            job_submit_lua=WRAPPER.format(inner=NOOP),
            extra_conf_files={
                "harp_plugin.lua": plugin_conf(lib, sock, work / "harp.disable"),
                "harp_entry.lua": (lib / "job_submit.lua").read_text(),
            },
        )

        try:
            cluster.start()
            cluster.write_job_submit(PHASED.format(conf_dir=cluster.conf_dir))
            with NoopServer(work / "noop.sock", kind=LANE) as noop:
                point(sock, noop.sock)
                plugin["no-op server"] = run(cluster, args.jobs, SCRIPT)
            daemon.start()
            point(sock, daemon.socket)
            try:
                plugin["daemon, 3-day job"] = run(cluster, args.jobs, SCRIPT)
                plugin["daemon, 1-hour job"] = run(cluster, args.jobs, SHORT_SCRIPT)
                plugin["daemon, 7-day job"] = run(cluster, args.jobs, LONG_SCRIPT)
                with Client(daemon.socket) as client:
                    canned = client.predict(**BENCH_JOB).SerializeToString()
            finally:
                daemon.stop()
            with NoopServer(work / "canned.sock", kind=LANE, reply=canned) as server:
                point(sock, server.sock)
                plugin["canned decision"] = run(cluster, args.jobs, SCRIPT)
        finally:
            cluster.stop()
            daemon.stop()
        calls = [json.loads(line) for line in phases_file.read_text().splitlines()]
    report(plugin, calls, args.jobs)


def row(label: str, figures: list[float]) -> str:
    return f"{label:<20}" + "".join(f"{v:>10.1f}" for v in figures)


def header(label: str, names: tuple[str, ...]) -> str:
    return f"{label:<20}" + "".join(f"{n[:9]:>10}" for n in names)


def report(plugin: dict[str, list[dict[str, float]]], calls: list[dict[str, float]], jobs: int) -> None:
    print(f"{jobs - WARMUP} held sbatch submissions per variant (after {WARMUP} warm-up); p50 in µs")
    names = (*LUA_PHASES, "other", "total")
    print("\nin slurmctld's Lua (the plugin)")
    print(header("variant", names))
    for variant, rows in plugin.items():
        print(row(variant, p50s(rows, names)))
    print("\nin the daemon (policy: policy and messages; transport: the call minus the handler)")
    print(header("job", (*DAEMON_PHASES[:3], "policy", *DAEMON_PHASES[4:-1], "transport", "after")))
    for variant, minutes in (
        ("daemon, 3-day job", 4320),
        ("daemon, 1-hour job", 60),
        ("daemon, 7-day job", 10080),
    ):
        mine = [c for c in calls if c["limit"] == minutes][WARMUP:jobs]
        # One Predict call per submission, in order: pair them to see the transport's share.
        transport = [lua["call"] - call["handler"] for lua, call in zip(plugin[variant], mine, strict=True)]
        figures = p50s(mine, DAEMON_PHASES)
        print(row(variant, [*figures[:-1], pct(transport, 50), figures[-1]]))


if __name__ == "__main__":
    main()
