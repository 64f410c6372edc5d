"""A real, private Slurm cluster for end-to-end tests.

Every file lives under one base directory and every daemon is started here, in the foreground, and
stopped by PID: no systemd, no /etc/slurm, no fixed ports, so two runs on one machine cannot collide.
Order: munged, MariaDB -> slurmdbd -> sacctmgr (cluster, accounts, user) -> slurmctld -> slurmd(s).
The configuration files are written by cluster_config, the start's steps are in cluster_startup, the
processes are kept and stopped by cluster_daemons.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from slurm_harp.core.job import FINISHED_STATES
from tests.e2e.client_output import SACCT_DELIMITER, parse_sacct_rows, parse_scontrol_record
from tests.e2e.cluster_config import write_conf_files
from tests.e2e.cluster_daemons import Daemons, tail
from tests.e2e.cluster_host import ClusterError, ClusterUnavailable, sbin_path, unavailable_reason
from tests.e2e.cluster_startup import Startup, free_ports

__all__ = [
    "MAX_BASE_DIR_CHARS",
    "TERMINAL_STATES",
    "ClusterError",
    "ClusterUnavailable",
    "SbatchResult",
    "SlurmCluster",
    "StartCluster",
]

# What sacct shows once a job is over: the readers' finished states, and REVOKED (federated
# sibling jobs), which the harvester has no use for but a wait must stop at.
TERMINAL_STATES = FINISHED_STATES | {"REVOKED"}
# Unix socket paths are limited to 108 bytes; slurmd puts per-step sockets in its spool directory.
MAX_BASE_DIR_CHARS = 64


@dataclass(frozen=True)
class SbatchResult:
    job_id: int | None
    stdout: str
    stderr: str
    returncode: int
    wall_seconds: float


# What the start_cluster fixtures return: call with SlurmCluster's keyword arguments.
StartCluster = Callable[..., "SlurmCluster"]


class SlurmCluster:
    """A private Slurm 22.05 cluster (controller, DBD, N virtual nodes) under ``base_dir``."""

    def __init__(
        self,
        base_dir: Path,
        *,
        job_submit_lua: str | None = None,
        extra_conf_files: Mapping[str, str] | None = None,
        nodes: int = 1,
        cpus_per_node: int | None = None,
        scheduler_parameters: str = "",
        slurm_conf_extra: str = "",
        node_extra: str = "",
        start_timeout: float = 90.0,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.base_dir = Path(base_dir).absolute()
        self.job_submit_lua = job_submit_lua
        self.extra_conf_files = dict(extra_conf_files or {})
        self.node_names = [f"c{i}" for i in range(1, nodes + 1)]
        self.slurm_conf_extra = slurm_conf_extra
        # Added to every NodeName line (e.g. "Gres=gpu:4" for GPUs that are counts only, no devices).
        self.node_extra = node_extra
        # Virtual nodes wider than this machine (sleep jobs use no CPU): slurmd then registers with
        # the configured size (config_overrides) instead of draining for "Low CPUs".
        self.cpus_per_node = cpus_per_node
        self.scheduler_parameters = scheduler_parameters
        self.start_timeout = start_timeout
        self.start_seconds: float | None = None
        self.phase_seconds: dict[str, float] = {}

        b = self.base_dir
        self.conf_dir = b / "etc"
        self.log_dir = b / "log"
        self.run_dir = b / "run"
        self.jobs_dir = b / "jobs"
        self.munge_dir = b / "munge"
        self.mysql_dir = b / "mysql"
        self.state_dir = b / "state"
        self.spool_dir = b / "spool"
        self.slurm_conf = self.conf_dir / "slurm.conf"
        self.munge_socket = self.munge_dir / "munge.sock"
        self.mysql_socket = self.run_dir / "mysqld.sock"

        self._atexit_registered = False
        self._job_submit_mtime = 0.0
        self.ctld_port = self.dbd_port = self.mysql_port = 0
        self.slurmd_ports: dict[str, int] = {}
        self.hostname = socket.gethostname().split(".")[0]

        # Drop SLURM_*/SBATCH_*... inherited from a CI runner that is itself a Slurm job.
        inherited = ("SLURM_", "SBATCH_", "SACCT_", "SQUEUE_", "SINFO_", "SCONTROL_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
        env["PATH"] = sbin_path()
        env["SLURM_CONF"] = str(self.slurm_conf)
        self._env = env
        self._daemons = Daemons(env, self.run_dir, self.log_dir, self.slurm_conf)

    # ---- context manager -------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- public helpers --------------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands (SLURM_CONF set, inherited SLURM_* removed)."""
        return dict(self._env)

    def run(self, args: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        kw.setdefault("timeout", 60)
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("env", self._env)
        kw.setdefault("cwd", self.jobs_dir)
        return subprocess.run(args, **kw)

    def sbatch(self, args: list[str], script: str) -> SbatchResult:
        """Submit ``script`` (read by sbatch from stdin) from the jobs directory, as root."""
        t0 = time.monotonic()
        proc = self.run(["sbatch", "--parsable", *args], input=script)
        wall = time.monotonic() - t0
        job_id = None
        if proc.returncode == 0:
            m = re.search(r"^(\d+)(?:;\S+)?\s*$", proc.stdout, re.MULTILINE)
            job_id = int(m.group(1)) if m else None
        return SbatchResult(job_id, proc.stdout, proc.stderr, proc.returncode, wall)

    def job_state(self, job_id: int) -> str | None:
        """The job's State in accounting ("CANCELLED by 0" -> "CANCELLED"), None before it is there."""
        row = self._allocation_row(job_id)
        return row["State"].split()[0] if row and row["State"] else None

    def _allocation_row(self, job_id: int) -> dict[str, str] | None:
        rows = self.sacct_rows([job_id], ["JobIDRaw", "State", "Partition"], allocations_only=True)
        return next((r for r in rows if r["JobIDRaw"] == str(job_id)), None)

    def wait_state(
        self,
        job_id: int,
        states: Iterable[str] = TERMINAL_STATES,
        timeout: float = 60.0,
        *,
        settled: bool = True,
    ) -> str:
        """Poll sacct until the job is in one of ``states``; fail early on any other terminal state.

        Accounting fills in late: slurmctld first stores a bare row (State, Account, NodeList, steps)
        and sends the job's full record (Partition, TimelimitRaw, ...) from a thread that runs every
        ~5 s. With ``settled`` a terminal state is returned only once that full record is in.
        """
        wanted = set(states)
        deadline = time.monotonic() + timeout
        settle_extended = False
        state: str | None = None
        while True:
            row = self._allocation_row(job_id)
            state = row["State"].split()[0] if row and row["State"] else None
            if state in wanted and row is not None:
                if not (settled and state in TERMINAL_STATES and not row["Partition"]):
                    return state
                if not settle_extended:
                    # The full record is at most a few db_inx rounds away, even at the timeout's edge.
                    deadline = max(deadline, time.monotonic() + 15.0)
                    settle_extended = True
            elif state in TERMINAL_STATES:
                raise ClusterError(
                    f"job {job_id} ended {state}, expected one of {sorted(wanted)}\n"
                    + self._job_diagnostics(job_id)
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"job {job_id} still {state} (accounting row {row}) after {timeout:.0f}s, "
                    f"expected one of {sorted(wanted)}\n" + self._job_diagnostics(job_id)
                )
            time.sleep(0.2)

    def sacct_rows(
        self, job_ids: Iterable[int] | None, fields: list[str], *, allocations_only: bool = False
    ) -> list[dict[str, str]]:
        """Accounting rows (jobs and their steps) keyed by the field names as given."""
        args = ["sacct", "-a", "-P", "--noconvert", "-n", f"--delimiter={SACCT_DELIMITER}"]
        args.append("--format=" + ",".join(fields))
        if allocations_only:
            args.append("-X")
        if job_ids is None:
            args += ["-S", "2000-01-01T00:00:00", "-E", "now"]
        else:
            ids = [str(j) for j in job_ids]
            if not ids:
                return []
            args += ["-j", ",".join(ids)]
        proc = self.run(args)
        if proc.returncode != 0:
            raise ClusterError(f"sacct failed ({proc.returncode}): {proc.stderr.strip()}")
        return parse_sacct_rows(proc.stdout, fields)

    def scontrol_show_job(self, job_id: int) -> dict[str, str]:
        """``scontrol show job`` as a dict; free-text fields (Comment, Command, ...) keep their spaces."""
        proc = self.run(["scontrol", "show", "job", str(job_id)])
        if proc.returncode != 0:
            raise ClusterError(f"scontrol show job {job_id} failed: {proc.stderr.strip()}")
        return parse_scontrol_record(proc.stdout)

    def write_job_submit(self, text: str) -> None:
        """Replace job_submit.lua; slurmctld reloads it on the next submission when its mtime grows."""
        path = self.conf_dir / "job_submit.lua"
        tmp = path.with_suffix(".lua.tmp")
        tmp.write_text(text)
        old = path.stat().st_mtime if path.exists() else 0.0
        # Slurm compares mtimes in whole seconds: step clearly past both the old file and the clock.
        mtime = max(time.time(), old, self._job_submit_mtime) + 2.0
        os.utime(tmp, (mtime, mtime))
        tmp.replace(path)
        self._job_submit_mtime = mtime

    def slurmctld_log(self) -> str:
        return (self.log_dir / "slurmctld.log").read_text(errors="replace")

    def log_tails(self, lines: int = 30) -> str:
        files = [self.log_dir / "slurmctld.log", self.log_dir / "slurmdbd.log"]
        files += [self.log_dir / f"slurmd.{n}.log" for n in self.node_names]
        return "\n".join(tail(f, lines) for f in files)

    # ---- start and stop --------------------------------------------------------------------------

    def start(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        if self._daemons.procs:
            raise ClusterError("cluster already started")
        if len(str(self.base_dir)) > MAX_BASE_DIR_CHARS:
            raise ClusterError(
                f"base_dir {self.base_dir} is longer than {MAX_BASE_DIR_CHARS} characters: "
                "Unix socket paths under it would be truncated"
            )
        t0 = time.monotonic()
        startup = Startup(self, self._daemons, deadline=t0 + self.start_timeout)
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            startup.prepare_dirs()
            ports = free_ports(3 + len(self.node_names))
            self.ctld_port, self.dbd_port, self.mysql_port = ports[:3]
            self.slurmd_ports = dict(zip(self.node_names, ports[3:], strict=True))
            self._phase("munged", startup.start_munge)
            self._phase("mariadb", startup.start_mariadb)
            node_hw = startup.node_hardware()
            self._write_configs(node_hw)
            self._phase("slurmdbd", startup.start_slurmdbd)
            self._phase("sacctmgr", startup.add_associations)
            self._phase("slurmctld", startup.start_slurmctld)
            startup.start_slurmds()
            self._phase("nodes idle", startup.wait_nodes_idle)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def _phase(self, name: str, step: Callable[[], None]) -> None:
        t0 = time.monotonic()
        step()
        self.phase_seconds[name] = time.monotonic() - t0

    def _write_configs(self, hw: Mapping[str, str]) -> None:
        # job_submit.lua here, beside write_job_submit, which steps past the mtime it starts with.
        if self.job_submit_lua is not None:
            (self.conf_dir / "job_submit.lua").write_text(self.job_submit_lua)
            self._job_submit_mtime = (self.conf_dir / "job_submit.lua").stat().st_mtime
        write_conf_files(self, hw)

    def reset_controller(self) -> None:
        """Stop slurmctld, empty its StateSaveLocation and start it again, as after a lost state
        directory: job ids start again at FirstJobId (1) while accounting keeps the jobs that had
        them. Run it with no job in the cluster."""
        self._daemons.stop_one("slurmctld")
        for entry in self.state_dir.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        startup = Startup(self, self._daemons, deadline=time.monotonic() + self.start_timeout)
        startup.start_slurmctld()
        startup.wait_nodes_idle()

    def restart_controller(self, state: Path | None = None, *, crash: bool = False) -> None:
        """Stop slurmctld (TERM, which saves its state; ``crash``: SIGKILL, which saves nothing), put
        ``state`` (a copy of its StateSaveLocation) in its place if given, and start it again from its
        state, the jobs running on: as after a crash, or a backup taking over from state saved a
        little earlier."""
        if crash:
            self._daemons.kill_one("slurmctld")
        else:
            self._daemons.stop_one("slurmctld")
        if state is not None:
            shutil.rmtree(self.state_dir)
            shutil.copytree(state, self.state_dir)
        startup = Startup(self, self._daemons, deadline=time.monotonic() + self.start_timeout)
        startup.start_slurmctld(clean=False)

    def stop(self) -> None:
        """Stop every daemon and any job process of this cluster (TERM, then KILL). Idempotent."""
        self._daemons.stop()
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    def _job_diagnostics(self, job_id: int) -> str:
        out = self.jobs_dir / f"slurm-{job_id}.out"
        return "\n".join([tail(out, 20), self.log_tails(20)])
