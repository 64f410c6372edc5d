"""Benchmark: our job_submit.lua inside a real slurmctld vs. a no-op job_submit.lua, in the same run.

    .venv/bin/python -m benchmarks.bench_plugin [--jobs 500]

Needs root and Debian's Slurm packages (as the end-to-end tests). Both variants run under the same
wrapper, which times the inner slurm_job_submit with a monotonic clock and logs it; sbatch wall time
is measured by the client. Three variants: a no-op script; our plugin talking to a no-op gRPC server
(the transport's floor: the plugin's HTTP/2 client + grpcio server, nothing predicted); our plugin
talking to a real `harp serve` (KTH-trained model; the "debug" partition in rewrite mode, so every job
gets the full predict-and-rewrite path). Held jobs (sbatch -H) keep the cluster idle, so only
submission is measured. The first 10 submissions of each variant are warm-up (script load, first
connection) and are left out.

--compare-lib DIR adds a variant: the plugin of another checkout (DIR: its plugin/ directory, with
job_submit.lua and harp/) against the same no-op gRPC server, e.g. `git archive main plugin | tar -x`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_daemon import _serve_noop
from benchmarks.common import train_bundled
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster
from tests.e2e.daemon_process import DaemonProcess

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


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def run_variant(cluster: SlurmCluster, name: str, jobs: int) -> tuple[list[float], list[float]]:
    before = len(re.findall(r"bench plugin_us=", cluster.slurmctld_log()))
    walls = []
    ids = []
    for _ in range(jobs):
        r = cluster.sbatch(["-H"], SCRIPT)
        assert r.returncode == 0 and r.job_id is not None, r.stderr
        walls.append(r.wall_seconds * 1e3)
        ids.append(str(r.job_id))
    cluster.run(["scancel", *ids])
    plugin = [int(x) / 1e3 for x in re.findall(r"bench plugin_us=(\d+)", cluster.slurmctld_log())[before:]]
    assert len(plugin) == jobs, f"{name}: {len(plugin)} timings for {jobs} jobs"
    return plugin[WARMUP:], walls[WARMUP:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--compare-lib", type=Path, help="another checkout's plugin/ directory")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="harp-bench-") as tmp:
        work = Path(tmp)
        store = work / "store"
        train_bundled(store)
        daemon = DaemonProcess(
            work, store, mode="shadow", extra='[[policy.rule]]\npartition = "debug"\nmode = "rewrite"\n'
        )
        plugin_conf = (
            f'return {{ lib_dir = "{REPO / "plugin"}", socket = "{daemon.socket}",'
            f' disable_file = "{work / "harp.disable"}" }}\n'
        )
        cluster = SlurmCluster(
            work / "c",
            job_submit_lua=WRAPPER.format(inner=NOOP),
            extra_conf_files={
                "harp_plugin.lua": plugin_conf,
                "harp_entry.lua": (REPO / "plugin" / "job_submit.lua").read_text(),
            },
        )
        results = {}
        try:
            cluster.start()
            results["no-op job_submit.lua (baseline)"] = run_variant(cluster, "noop", args.jobs)
            cluster.write_job_submit(WRAPPER.format(inner=HARP.format(conf_dir=cluster.conf_dir)))
            stop = mp.Event()
            floor = mp.Process(target=_serve_noop, args=(str(daemon.socket), stop))
            floor.start()
            while not daemon.socket.exists():
                time.sleep(0.01)
            try:
                results["harp plugin + no-op gRPC server"] = run_variant(cluster, "floor", args.jobs)
                if args.compare_lib:
                    other = work / "compare"
                    other.mkdir()
                    lib = args.compare_lib.absolute()
                    (other / "harp_entry.lua").write_text((lib / "job_submit.lua").read_text())
                    (other / "harp_plugin.lua").write_text(
                        plugin_conf.replace(str(REPO / "plugin"), str(lib))
                    )
                    cluster.write_job_submit(WRAPPER.format(inner=HARP.format(conf_dir=other)))
                    results["compare-lib plugin + no-op server"] = run_variant(cluster, "compare", args.jobs)
                    cluster.write_job_submit(WRAPPER.format(inner=HARP.format(conf_dir=cluster.conf_dir)))
            finally:
                stop.set()
                floor.join()
            daemon.start()
            results["harp plugin + harp daemon"] = run_variant(cluster, "harp", args.jobs)
            rewrites = cluster.slurmctld_log().count("time_limit 4320->")
        finally:
            cluster.stop()
            daemon.stop()
    n = args.jobs - WARMUP
    print(f"{n} held sbatch submissions per variant (after {WARMUP} warm-up), times in ms")
    print(f"{'variant':<34} {'plugin p50':>10} {'plugin p99':>10} {'sbatch p50':>10} {'sbatch p99':>10}")
    for name, (plugin, walls) in results.items():
        figures = (pct(plugin, 50), pct(plugin, 99), pct(walls, 50), pct(walls, 99))
        print(f"{name:<34} " + " ".join(f"{v:>10.3f}" for v in figures))
    (bp, bw) = results["no-op job_submit.lua (baseline)"]
    added = {"gRPC floor": "harp plugin + no-op gRPC server", "harp": "harp plugin + harp daemon"}
    if args.compare_lib:
        added["compare-lib floor"] = "compare-lib plugin + no-op server"
    for name, variant in added.items():
        p, w = results[variant]
        print(
            f"added by {name}: plugin p50 +{pct(p, 50) - pct(bp, 50):.3f} ms,"
            f" p99 +{pct(p, 99) - pct(bp, 99):.3f} ms;"
            f" sbatch p50 x{pct(w, 50) / pct(bw, 50):.2f}, p99 x{pct(w, 99) / pct(bw, 99):.2f}"
        )
    print(f"jobs rewritten by the plugin: {rewrites} of {args.jobs}")


if __name__ == "__main__":
    main()
