"""What the advice e2e tests share: a public cluster, a user's runs of one job name at two sizes (1 CPU
for 20 s, 2 CPUs for 6 s: the 2-CPU run is the cheaper), harvested from real sacct, and a `harp serve`
with an advice socket that every user reaches."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from slurm_harp.api import predictor_pb2 as pb
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.daemon_process import DaemonProcess
from tests.e2e.harvesting import harvest

# (tasks, seconds) of the two runs
SIZES = ((1, 20), (2, 6))


def open_site(start_cluster: StartCluster, **cluster_args: Any) -> Iterator[tuple[SlurmCluster, Path]]:
    """For a test module's ``site`` fixture: the cluster (SlurmCluster's ``cluster_args`` beside its
    own) and a work directory every user may enter."""
    # Wider than this machine (sleep jobs use no CPU): the jobs run at once.
    cluster = start_cluster(public=True, cpus_per_node=4, **cluster_args)
    work = Path(tempfile.mkdtemp(prefix="harp-advise-"))
    work.chmod(0o755)  # the advice socket's directory: every user reaches it
    try:
        yield cluster, work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def submit_two_sizes(cluster: SlurmCluster, name: str) -> list[int]:
    """Job ids of ``name`` run as root at each of SIZES (not waited for)."""
    ids = []
    for tasks, seconds in SIZES:
        done = cluster.sbatch(["-J", name, "-n", str(tasks), "-t", "5"], f"#!/bin/sh\nsleep {seconds}\n")
        assert done.job_id is not None, done.stderr
        ids.append(done.job_id)
    return ids


def advice_daemon(cluster: SlurmCluster, work: Path) -> DaemonProcess:
    """`harp serve` (not started) on the history harvested into ``work``/jobs.sqlite, advising on
    ``work``/advice.sock."""
    harvest(cluster, work / "jobs.sqlite")
    return DaemonProcess(
        work,
        work / "store",  # no model: the advice needs none
        extra=f'[history]\ndb = "{work / "jobs.sqlite"}"\n[advice]\nsocket = "{work / "advice.sock"}"\n',
        env=cluster.env,  # the daemon reads the partitions with this cluster's scontrol
    )


def harp_advise(cluster: SlurmCluster, *args: str) -> dict[str, Any]:
    """`harp advise ARGS --json` run with this cluster's Slurm; its answer."""
    bin_dir = os.path.dirname(sys.executable)
    env = cluster.env | {"PATH": f"{cluster.env['PATH']}:/usr/bin:{bin_dir}"}
    argv = [sys.executable, "-m", "slurm_harp.cli", "advise", *args, "--json"]
    done = cluster.run(argv, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@contextmanager
def advising(cluster: SlurmCluster, work: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """advice_daemon() serving for the block, which gets `harp advise` through its socket."""
    daemon = advice_daemon(cluster, work)
    daemon.start()
    try:
        yield lambda *args: harp_advise(cluster, "--socket", str(work / "advice.sock"), *args)
    finally:
        daemon.stop()


def scripts(work: Path, prefix: str, options: Mapping[str, str]) -> dict[str, Path]:
    """A batch script in ``work`` per name, named ``prefix-name`` (-J), with the name's options."""
    paths = {}
    for name, given in options.items():
        paths[name] = work / f"{name}.sbatch"
        paths[name].write_text(f"#!/bin/sh\n#SBATCH -J {prefix}-{name} {given}\ntrue\n")
    return paths


def held_record(cluster: SlurmCluster, done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """What slurmctld holds of the job ``done`` (``sbatch --parsable --hold``) submitted, then cancelled."""
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip().split(";")[0])
    try:
        return cluster.scontrol_show_job(job_id)
    finally:
        cluster.run(["scancel", str(job_id)])


def login_node(cluster: SlurmCluster, conf: Path, cli_filter: str) -> dict[str, str]:
    """sbatch's environment on a "login node": ``conf`` holds a copy of the cluster's slurm.conf plus
    ``CliFilterPlugins=lua`` and ``cli_filter`` as its cli_filter.lua, which sbatch reads through
    SLURM_CONF; slurmctld and the other tests keep the cluster's own configuration."""
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "slurm.conf").write_text(cluster.slurm_conf.read_text() + "\nCliFilterPlugins=lua\n")
    (conf / "cli_filter.lua").write_text(cli_filter)
    return cluster.env | {"SLURM_CONF": str(conf / "slurm.conf")}


# A cli_filter.lua that records, in a real sbatch, the options named (as sbatch shows them) and the
# AdviceRequest the hook builds from them (harp.sbatch_request, harp.pb), in $HARP_RECORD.options and
# $HARP_RECORD.request; of a heterogeneous job, its first component.
_RECORDER = """
package.path = "{plugin}/?.lua;" .. package.path
local sbatch_request = require "harp.sbatch_request"
local pb = require "harp.pb"
local names = {names}
local function index(t, k) return t[k] end
function slurm_cli_setup_defaults(options, early) return slurm.SUCCESS end
function slurm_cli_pre_submit(options, offset)
  if offset ~= 0 then return slurm.SUCCESS end
  local out = os.getenv("HARP_RECORD")
  local f = assert(io.open(out .. ".options", "w"))
  for _, name in ipairs(names) do
    local ok, v = pcall(index, options, name)
    f:write(name, "\\t", ok and tostring(v) or "(error)", "\\n")
  end
  f:close()
  local r = sbatch_request.build(options)
  f = assert(io.open(out .. ".request", "wb"))
  f:write(pb.encode_advice_request(r, sbatch_request.exclusive(options)))
  f:close()
  return slurm.SUCCESS
end
function slurm_cli_post_submit(offset, job_id, step_id) return slurm.SUCCESS end
"""


def recording_hook(cluster: SlurmCluster, conf: Path, names: Sequence[str] = ()) -> dict[str, str]:
    """sbatch's environment on a login node (login_node) whose cli_filter records what the hook sees
    and sends; add HARP_RECORD (a path prefix) per sbatch, then read it with hook_record."""
    recorder = _RECORDER.format(plugin=REPO / "plugin", names="{" + ", ".join(map(json.dumps, names)) + "}")
    return login_node(cluster, conf, recorder)


def hook_record(record: Path) -> tuple[dict[str, str], pb.AdviceRequest]:
    """The options the recording hook saw (name: as sbatch showed it) and the AdviceRequest it built."""
    lines = Path(f"{record}.options").read_text().splitlines()
    request = pb.AdviceRequest.FromString(Path(f"{record}.request").read_bytes())
    return dict(line.split("\t", 1) for line in lines), request
