"""Benchmark: our job_submit.lua inside a real slurmctld vs. a no-op job_submit.lua, in the same run.

    .venv/bin/python -m benchmarks.bench_plugin [--jobs 500] [--load-jobs 400] [--submitters 8]

Needs root and Debian's Slurm packages (as the end-to-end tests). All variants run under the same
wrapper, which times the inner slurm_job_submit with a monotonic clock and logs it; sbatch wall time
is measured by the client. Variants: a no-op script; our plugin talking to a no-op gRPC server (the
transport's floor: the plugin's HTTP/2 client + grpcio server, nothing predicted); our plugin
talking to a real `harp serve` (KTH-trained model; the "debug" partition in rewrite mode, so every
call takes the daemon's whole rewrite path), with 1-CPU 3-day jobs (the bundled model's rule reads four
models for them) and, with the lane, 1-CPU 1-hour jobs (one model, as for most jobs) and 1-CPU
7-day jobs; the rule keeps the 3-day and 1-hour requests (the plugin annotates the job) and cuts
the 7-day one (the plugin rewrites its limit and tells the user: "rewritten" counts them); our plugin
talking to a no-op server that answers what the daemon answered for the 3-day job ("canned
decision": the plugin's own cost of applying a decision, without the daemon's work). The servers
answer Predict in their core lane (the daemon's default, slurm_harp.server.unary_lane) and again in
grpcio's worker pool ("worker pool"). Held jobs (sbatch -H) keep the cluster idle, so only
submission is measured. The first 10 submissions of each variant are warm-up (script load, first
connection) and are left out; "failed" counts the plugin's failed daemon calls (the job went through
unchanged), so every other call reached the model.

Under load: --submitters sbatch loops at once submit --load-jobs jobs in all, with the no-op script,
then with the plugin and the daemon, with the plugin and a no-op server (what the transport
alone leaves of the rate), and with the plugin and the canned decision (what any decision path
leaves of it, the daemon's work aside), --rounds times in turn, the variants after the no-op
script in a rotated order (the machine's load drifts: each round's ratios
compare runs a few seconds apart); slurmctld's submissions per second, the time in the plugin, and
the median ratio of each variant to the no-op script.

--pin-cpu N adds variants: the no-op server and the daemon again with every thread of theirs on
CPU N (as systemd's CPUAffinity= would pin `harp serve`), and under load a run per round with the
daemon pinned.

--nice N adds runs under load with the daemon's threads, and then the canned decision's, at nice N
(negative: ahead of the sbatch loops for a CPU, as systemd's Nice= would set `harp serve`).

--compare-lib DIR adds variants: the plugin of another checkout (DIR: its plugin/ directory, with
job_submit.lua and harp/) against the same no-op gRPC server, e.g. `git archive main plugin | tar -x`,
with SCRIPT and with a header of 13 directives (TYPICAL_SCRIPT), which this checkout's plugin then
runs too.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any

from benchmarks.common import train_bundled
from benchmarks.noop_server import LANE, NoopServer
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster
from tests.e2e.daemon_process import DaemonProcess
from tests.integration.harp_client import Client

WARMUP = 10
WRAPPER = """
local clock = require("cqueues").monotime
{inner}
local inner = slurm_job_submit
function slurm_job_submit(job_desc, part_list, submit_uid)
  local t0 = clock()
  local rc = inner(job_desc, part_list, submit_uid)
  slurm.log_info("bench plugin_us=%d", math.floor((clock() - t0) * 1e6 + 0.5))
  return rc
end
"""
NOOP = """
function slurm_job_submit(job_desc, part_list, submit_uid) return slurm.SUCCESS end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid) return slurm.SUCCESS end
"""
HARP = 'dofile("{conf_dir}/harp_entry.lua")'
SCRIPT = "#!/bin/sh\n#SBATCH -t 3-00:00:00\n#SBATCH -p debug\n#SBATCH -J bench\nsleep 1\n"
# What the plugin sends for SCRIPT, as far as the decision goes (request.lua builds the rest).
BENCH_JOB: dict[str, Any] = {
    "user_name": "root",
    "partition": "debug",
    "job_name": "bench",
    "time_limit_minutes": 4320,
}
# A 1-CPU hour: the calibrated rule reads one model for it (three days: four), as for most jobs.
SHORT_SCRIPT = SCRIPT.replace("3-00:00:00", "1:00:00")
# SCRIPT with a header of 13 directives, as real scripts have (the ten more change nothing the plugin
# sends): with --compare-lib, both plugins run it too (a plugin that hashed the header paid per line).
TYPICAL_SCRIPT = SCRIPT.replace(
    "#SBATCH -J bench\n",
    "#SBATCH -J bench\n"
    + "".join(
        f"#SBATCH {option}\n"
        for option in (
            "--output=%x-%j.out", "--error=%x-%j.err", "--mail-type=END,FAIL",
            "--mail-user=someone@example.org", "--open-mode=append", "--no-requeue",
            "--signal=B:USR1@60", "--comment=relax_Si_supercell", "--distribution=block",
            "--hint=nomultithread",
        )
    ),
)  # fmt: skip
# Seven days: the rule cuts it, so the plugin takes its rewrite path (limit, user message, log line).
LONG_SCRIPT = SCRIPT.replace("3-00:00:00", "7-00:00:00")
# The daemon's policy: the "debug" partition in rewrite mode, so every job gets the whole path.
REWRITE_DEBUG = '[[policy.rule]]\npartition = "debug"\nmode = "rewrite"\n'


def plugin_conf(lib: Path, sock: Path, disable: Path) -> str:
    """harp_plugin.lua for the plugin in ``lib`` (a plugin/ directory) talking to ``sock``."""
    return f'return {{ lib_dir = "{lib}", socket = "{sock}", disable_file = "{disable}" }}\n'


def point(sock: Path, target: Path) -> None:
    """Make the plugin's socket ``sock`` a link to the server of the next variant."""
    sock.unlink(missing_ok=True)
    sock.symlink_to(target)


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


FAILED = re.compile(r"daemon call failed|daemon still unavailable")
REWROTE = re.compile(r"time_limit \d+->\d+ min")
POOL = ", worker pool"


def plugin_ms(log: str) -> list[float]:
    """The wrapper's time in the plugin (ms) for each submission in ``log`` (slurmctld's)."""
    return [int(x) / 1e3 for x in re.findall(r"bench plugin_us=(\d+)", log)]


def failures(log: str) -> int:
    """The plugin's failed daemon calls in ``log`` (slurmctld's, over one variant)."""
    return len(FAILED.findall(log))


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` on ``cpus`` (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def renice(pid: int, nice: int) -> None:
    """Every thread of process ``pid`` at ``nice`` (Linux keeps it per thread; new threads inherit)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def submit_held(cluster: SlurmCluster, jobs: int, script: str) -> tuple[list[float], str]:
    """``jobs`` held submissions, then cancelled: sbatch's wall times (ms) and what slurmctld
    logged meanwhile."""
    start = len(cluster.slurmctld_log())
    walls = []
    ids = []
    for _ in range(jobs):
        r = cluster.sbatch(["-H"], script)
        assert r.returncode == 0 and r.job_id is not None, r.stderr
        walls.append(r.wall_seconds * 1e3)
        ids.append(str(r.job_id))
    cluster.run(["scancel", *ids])
    return walls, cluster.slurmctld_log()[start:]


def run_variant(
    cluster: SlurmCluster, name: str, jobs: int, script: str = SCRIPT
) -> tuple[list[float], list[float], int, int]:
    """The plugin's and sbatch's times (ms) after warm-up, the failed calls, the jobs rewritten."""
    walls, log = submit_held(cluster, jobs, script)
    plugin = plugin_ms(log)
    assert len(plugin) == jobs, f"{name}: {len(plugin)} timings for {jobs} jobs"
    return plugin[WARMUP:], walls[WARMUP:], failures(log), len(REWROTE.findall(log))


def run_load(cluster: SlurmCluster, jobs: int, submitters: int) -> tuple[float, float, float, int]:
    """``submitters`` sbatch loops at once, ``jobs`` in all: submissions per second, the time in
    the plugin (p50, p99 ms), failed calls."""
    for _ in range(WARMUP):
        cluster.sbatch(["-H"], SCRIPT)
    start = len(cluster.slurmctld_log())

    def loop(count: int) -> list[str]:
        ids = []
        for _ in range(count):
            r = cluster.sbatch(["-H"], SCRIPT)
            assert r.returncode == 0 and r.job_id is not None, r.stderr
            ids.append(str(r.job_id))
        return ids

    t0 = time.monotonic()
    with futures.ThreadPoolExecutor(submitters) as pool:
        list(pool.map(loop, [jobs // submitters] * submitters))  # raises what a loop raised
    rate = submitters * (jobs // submitters) / (time.monotonic() - t0)
    cluster.run(["scancel", "-u", "root"])
    log = cluster.slurmctld_log()[start:]
    plugin = plugin_ms(log)
    return rate, pct(plugin, 50), pct(plugin, 99), failures(log)


def pinned_label(cpu: int | None) -> str:
    """What a variant's name says when its server runs on CPU ``cpu`` (--pin-cpu)."""
    return f", pinned to CPU {cpu}"


def run_rounds(
    cluster: SlurmCluster,
    args: argparse.Namespace,
    daemon: DaemonProcess,
    work: Path,
    scripts: tuple[str, str],
    canned: bytes,
) -> list[tuple[str, tuple[float, float, float, int]]]:
    """The runs under load, ``args.rounds`` rounds of each variant in turn: the no-op script, the
    plugin with the daemon, the plugin with a no-op server (what the transport alone leaves of the
    rate), the plugin with a server answering ``canned`` (the daemon's decision without its work)
    and, with --pin-cpu, the daemon on that CPU."""
    noop_script, harp = scripts
    everywhere = os.sched_getaffinity(0)
    sock = work / "harp.sock"
    assert daemon.proc is not None
    out = []
    with (
        NoopServer(work / "noop-load.sock", kind=LANE) as noop,
        NoopServer(work / "canned-load.sock", kind=LANE, reply=canned) as decided,
    ):
        assert decided.proc is not None
        variants = [
            ("no-op job_submit.lua", noop_script, daemon.socket, everywhere, 0),
            ("harp plugin + harp daemon", harp, daemon.socket, everywhere, 0),
            ("harp plugin + no-op server", harp, noop.sock, everywhere, 0),
            ("harp plugin + canned decision", harp, decided.sock, everywhere, 0),
        ]
        if args.pin_cpu is not None:
            label = "harp plugin + harp daemon" + pinned_label(args.pin_cpu)
            variants.append((label, harp, daemon.socket, {args.pin_cpu}, 0))
        if args.nice:
            at_nice = f", nice {args.nice}"
            for label, server in (("harp daemon", daemon.socket), ("canned decision", decided.sock)):
                variants.append((f"harp plugin + {label}{at_nice}", harp, server, everywhere, args.nice))
        for k in range(args.rounds):
            # The no-op script first, the others rotated: the rate drifts within a round, and
            # no variant should always run last.
            at = k % (len(variants) - 1)
            for name, script, server, cpus, nice in [variants[0], *variants[1 + at :], *variants[1 : 1 + at]]:
                pin(daemon.proc.pid, cpus)
                renice(daemon.proc.pid, nice if server == daemon.socket else 0)
                renice(decided.proc.pid, nice if server == decided.sock else 0)
                point(sock, server)
                cluster.write_job_submit(script)  # a new script: a new Lua state, a new connection
                out.append((name, run_load(cluster, args.load_jobs, args.submitters)))
    pin(daemon.proc.pid, everywhere)
    renice(daemon.proc.pid, 0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--load-jobs", type=int, default=400, help="jobs in all under load (0: no load runs)")
    ap.add_argument("--submitters", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="under-load runs of each, in turn")
    ap.add_argument("--compare-lib", type=Path, help="another checkout's plugin/ directory")
    ap.add_argument("--pin-cpu", type=int, help="also run the servers with their threads on this CPU")
    ap.add_argument("--nice", type=int, default=0, help="also run under load with the servers at this nice")
    args = ap.parse_args()
    everywhere = os.sched_getaffinity(0)
    pinned = None if args.pin_cpu is None else {args.pin_cpu}
    on_cpu = pinned_label(args.pin_cpu)
    results = {}
    load: list[tuple[str, tuple[float, float, float, int]]] = []
    with tempfile.TemporaryDirectory(prefix="harp-bench-") as tmp:
        work = Path(tmp)
        store = work / "store"
        train_bundled(store)
        for i in range(2):
            (work / f"d{i}").mkdir()
        daemons = {
            label: DaemonProcess(
                work / f"d{i}",
                store,
                mode="shadow",
                extra=REWRITE_DEBUG,
                server_extra=f"predict_lane = {str(lane).lower()}\n",
            )
            for i, (label, lane) in enumerate((("", True), (POOL, False)))
        }
        sock = work / "harp.sock"  # the plugin's socket: a link to the server of the variant
        cluster = SlurmCluster(
            work / "c",
            job_submit_lua=WRAPPER.format(inner=NOOP),
            extra_conf_files={
                "harp_plugin.lua": plugin_conf(REPO / "plugin", sock, work / "harp.disable"),
                "harp_entry.lua": (REPO / "plugin" / "job_submit.lua").read_text(),
            },
        )
        harp = WRAPPER.format(inner=HARP.format(conf_dir=cluster.conf_dir))
        noop_script = WRAPPER.format(inner=NOOP)

        try:
            cluster.start()
            results["no-op job_submit.lua (baseline)"] = run_variant(cluster, "noop", args.jobs)
            cluster.write_job_submit(harp)
            for label in ("", POOL):
                with NoopServer(work / "noop.sock", kind="" if label else LANE) as noop:
                    point(sock, noop.sock)
                    results["harp plugin + no-op server" + label] = run_variant(cluster, "floor", args.jobs)
                    if args.compare_lib and not label:  # each plugin's two scripts in a row, after its load
                        results["harp plugin + no-op server, 13 directives"] = run_variant(
                            cluster, "floor", args.jobs, TYPICAL_SCRIPT
                        )
                        other = work / "compare"
                        other.mkdir()
                        lib = args.compare_lib.absolute()
                        (other / "harp_entry.lua").write_text((lib / "job_submit.lua").read_text())
                        (other / "harp_plugin.lua").write_text(plugin_conf(lib, sock, work / "harp.disable"))
                        cluster.write_job_submit(WRAPPER.format(inner=HARP.format(conf_dir=other)))
                        results["compare-lib plugin + no-op server"] = run_variant(
                            cluster, "compare", args.jobs
                        )
                        results["compare-lib plugin + no-op server, 13 directives"] = run_variant(
                            cluster, "compare", args.jobs, TYPICAL_SCRIPT
                        )
                        cluster.write_job_submit(harp)
                    if pinned and not label and noop.proc is not None:
                        pin(noop.proc.pid, pinned)
                        floor = run_variant(cluster, "floor", args.jobs)
                        results["harp plugin + no-op server" + on_cpu] = floor
            for label, daemon in daemons.items():
                daemon.start()
                point(sock, daemon.socket)
                try:
                    results["harp plugin + harp daemon" + label] = run_variant(cluster, "harp", args.jobs)
                    if not label:
                        results["harp plugin + harp daemon, 1-hour job"] = run_variant(
                            cluster, "harp-short", args.jobs, SHORT_SCRIPT
                        )
                        results["harp plugin + harp daemon, 7-day job"] = run_variant(
                            cluster, "harp-long", args.jobs, LONG_SCRIPT
                        )
                        with Client(daemon.socket) as client:
                            canned = client.predict(**BENCH_JOB).SerializeToString()
                    if pinned and not label:
                        assert daemon.proc is not None
                        pin(daemon.proc.pid, pinned)
                        results["harp plugin + harp daemon" + on_cpu] = run_variant(
                            cluster, "harp", args.jobs
                        )
                        results["harp plugin + harp daemon, 1-hour job" + on_cpu] = run_variant(
                            cluster, "harp-short", args.jobs, SHORT_SCRIPT
                        )
                        pin(daemon.proc.pid, everywhere)
                    if args.load_jobs and not label:
                        load += run_rounds(cluster, args, daemon, work, (noop_script, harp), canned)
                finally:
                    daemon.stop()
            # The daemon's answer without its work: the plugin's own cost of applying a decision.
            with NoopServer(work / "canned.sock", kind=LANE, reply=canned) as server:
                point(sock, server.sock)
                results["harp plugin + canned decision"] = run_variant(cluster, "canned", args.jobs)
        finally:
            cluster.stop()
            for daemon in daemons.values():
                daemon.stop()
    n = args.jobs - WARMUP
    print(f"{n} held sbatch submissions per variant (after {WARMUP} warm-up), times in ms")
    print(
        f"{'variant':<56} {'plugin p50':>10} {'plugin p99':>10} {'sbatch p50':>10} {'sbatch p99':>10}"
        f" {'failed':>6} {'rewritten':>9}"
    )
    for name, (plugin, walls, failed, rewritten) in results.items():
        figures = (pct(plugin, 50), pct(plugin, 99), pct(walls, 50), pct(walls, 99))
        print(f"{name:<56} " + " ".join(f"{v:>10.3f}" for v in figures) + f" {failed:>6} {rewritten:>9}")
    (bp, bw, _, _) = results["no-op job_submit.lua (baseline)"]
    for name, (p, w, _, _) in results.items():
        if name.startswith("no-op"):
            continue
        print(
            f"added by {name}: plugin p50 +{pct(p, 50) - pct(bp, 50):.3f} ms,"
            f" p99 +{pct(p, 99) - pct(bp, 99):.3f} ms;"
            f" sbatch p50 x{pct(w, 50) / pct(bw, 50):.2f}, p99 x{pct(w, 99) / pct(bw, 99):.2f}"
        )
    if load:
        print(
            f"under load: {args.submitters} sbatch loops at once, {args.load_jobs} held jobs in all, in turn"
        )
        print(f"{'variant':<56} {'subm/s':>8} {'plugin p50':>10} {'plugin p99':>10} {'failed':>6}")
        for name, (rate, p50, p99, failed) in load:
            print(f"{name:<56} {rate:>8.1f} {p50:>10.3f} {p99:>10.3f} {failed:>6}")
        # Each round starts with the no-op script; every other variant is compared with it.
        names = list(dict.fromkeys(name for name, _ in load))
        rounds = [dict(load[i : i + len(names)]) for i in range(0, len(load), len(names))]
        for what in names[1:]:
            ratios = [r[what][0] / r[names[0]][0] for r in rounds]
            print(
                f"submissions/s with {what} / with the no-op script, per round: "
                + ", ".join(f"{x:.2f}" for x in ratios)
                + f"; median {statistics.median(ratios):.2f}"
            )


if __name__ == "__main__":
    main()
