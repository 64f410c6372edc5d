"""A real, private Slurm cluster for end-to-end tests.

Every file lives under one base directory and every daemon is started here, in the foreground, and
stopped by PID: no systemd, no /etc/slurm, no fixed ports, so two runs on one machine cannot collide.
Order: munged, MariaDB -> slurmdbd -> sacctmgr (cluster, accounts, user) -> slurmctld -> slurmd(s).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from slurm_harp.core.job import FINISHED_STATES

CLUSTER_NAME = "harp"
ACCOUNTS = ("research", "teaching")
DEFAULT_ACCOUNT = "research"
PARTITIONS = ("batch", "debug")
# What sacct shows once a job is over: the readers' finished states, and REVOKED (federated
# sibling jobs), which the harvester has no use for but a wait must stop at.
TERMINAL_STATES = FINISHED_STATES | {"REVOKED"}
DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db")
CLIENTS = ("sbatch", "sacct", "sacctmgr", "scontrol", "sinfo", "squeue", "scancel")
# Unix socket paths are limited to 108 bytes; slurmd puts per-step sockets in its spool directory.
MAX_BASE_DIR_CHARS = 64
# Keeps the node below what slurmd measures, else slurmctld drains it for "Low RealMemory".
MEMORY_HEADROOM_MB = 512
DB_PASSWORD = "harp-e2e"
# sacct -P separates with "|", which a free-text comment may contain.
SACCT_DELIMITER = "\x1f"


class ClusterError(RuntimeError):
    """The cluster could not be started or did not behave; the message carries the log tails."""


class ClusterUnavailable(ClusterError):
    """This machine cannot host a cluster at all (not root, Slurm/munge/MariaDB not installed)."""


@dataclass(frozen=True)
class SbatchResult:
    job_id: int | None
    stdout: str
    stderr: str
    returncode: int
    wall_seconds: float


# What the start_cluster fixtures return: call with SlurmCluster's keyword arguments.
StartCluster = Callable[..., "SlurmCluster"]


def _sbin_path() -> str:
    # Daemons live in /usr/sbin, which a non-login root shell in CI may lack.
    parts = os.environ.get("PATH", "").split(os.pathsep)
    parts += [p for p in ("/usr/local/sbin", "/usr/sbin", "/sbin") if p not in parts]
    return os.pathsep.join(p for p in parts if p)


def unavailable_reason() -> str | None:
    """Why this machine cannot run a cluster, or None if it can."""
    if os.geteuid() != 0:
        return "the e2e cluster runs its daemons and jobs as root (SlurmUser=root); run the tests as root"
    path = _sbin_path()
    missing = [b for b in (*DAEMONS, *CLIENTS) if shutil.which(b, path=path) is None]
    if missing:
        return f"missing programs {', '.join(missing)}: run .ci/install-system.sh"
    return None


def _free_ports(count: int) -> list[int]:
    # Hold every socket until all are chosen so one cluster never gets the same port twice.
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"--- {path}: (missing)"
    return f"--- {path} (last {lines} lines):\n" + "\n".join(text.splitlines()[-lines:])


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # A daemon must not outlive a test run that was killed without running atexit handlers.
    # (The signal follows the forking *thread*: only used when started from the main thread.)
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


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
        start_timeout: float = 90.0,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.base_dir = Path(base_dir).absolute()
        self.job_submit_lua = job_submit_lua
        self.extra_conf_files = dict(extra_conf_files or {})
        self.node_names = [f"c{i}" for i in range(1, nodes + 1)]
        self.slurm_conf_extra = slurm_conf_extra
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

        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._outputs: list[IO[bytes]] = []
        self._deadline = 0.0
        self._atexit_registered = False
        self._job_submit_mtime = 0.0
        self.ctld_port = self.dbd_port = self.mysql_port = 0
        self.slurmd_ports: dict[str, int] = {}
        self.hostname = socket.gethostname().split(".")[0]

        # Drop SLURM_*/SBATCH_*... inherited from a CI runner that is itself a Slurm job.
        inherited = ("SLURM_", "SBATCH_", "SACCT_", "SQUEUE_", "SINFO_", "SCONTROL_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
        env["PATH"] = _sbin_path()
        env["SLURM_CONF"] = str(self.slurm_conf)
        self._env = env

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
        rows = []
        for line in proc.stdout.splitlines():
            if not line:
                continue
            values = line.split(SACCT_DELIMITER)
            if len(values) != len(fields):
                raise ClusterError(f"sacct row has {len(values)} fields, wanted {len(fields)}: {line!r}")
            rows.append(dict(zip(fields, values, strict=True)))
        return rows

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
        return "\n".join(_tail(f, lines) for f in files)

    # ---- start -----------------------------------------------------------------------------------

    def start(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        if self._procs:
            raise ClusterError("cluster already started")
        if len(str(self.base_dir)) > MAX_BASE_DIR_CHARS:
            raise ClusterError(
                f"base_dir {self.base_dir} is longer than {MAX_BASE_DIR_CHARS} characters: "
                "Unix socket paths under it would be truncated"
            )
        t0 = time.monotonic()
        self._deadline = t0 + self.start_timeout
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            self._prepare_dirs()
            ports = _free_ports(3 + len(self.node_names))
            self.ctld_port, self.dbd_port, self.mysql_port = ports[:3]
            self.slurmd_ports = dict(zip(self.node_names, ports[3:], strict=True))
            self._phase("munged", self._start_munge)
            self._phase("mariadb", self._start_mariadb)
            node_hw = self._node_hardware()
            self._write_configs(node_hw)
            self._phase("slurmdbd", self._start_slurmdbd)
            self._phase("sacctmgr", self._add_associations)
            self._phase("slurmctld", self._start_slurmctld)
            for name in self.node_names:
                self._spawn(f"slurmd.{name}", ["slurmd", "-D", "-N", name, "-f", str(self.slurm_conf)])
            self._phase("nodes idle", self._wait_nodes_idle)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def _phase(self, name: str, step: Callable[[], None]) -> None:
        t0 = time.monotonic()
        step()
        self.phase_seconds[name] = time.monotonic() - t0

    def _prepare_dirs(self) -> None:
        for d in (
            self.base_dir,
            self.conf_dir,
            self.log_dir,
            self.run_dir,
            self.jobs_dir,
            self.munge_dir,
            self.state_dir,
            self.spool_dir,
        ):
            d.mkdir(parents=True, exist_ok=True)
            # munged refuses group/world-writable directories on its paths.
            d.chmod(0o755)
        for name in self.node_names:
            (self.spool_dir / name).mkdir(exist_ok=True)

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.log_dir / f"{name}.out", "ab")  # noqa: SIM115 - closed in stop()
        self._outputs.append(out)
        proc = subprocess.Popen(
            args,
            env=self._env,
            cwd=self.run_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
        self._procs[name] = proc
        return proc

    def _fail(self, what: str, logs: Iterable[Path]) -> ClusterError:
        parts = [what]
        for name, proc in self._procs.items():
            rc = proc.poll()
            if rc is not None:
                parts.append(f"{name} (pid {proc.pid}) exited with {rc}")
        parts += [_tail(p) for p in logs]
        return ClusterError("\n".join(parts))

    def _wait_for(self, what: str, ready: Any, proc_name: str, logs: Iterable[Path]) -> None:
        logs = list(logs)
        while True:
            if ready():
                return
            proc = self._procs.get(proc_name)
            if proc is not None and proc.poll() is not None:
                raise self._fail(f"{proc_name} died while waiting for {what}", logs)
            if self._remaining() <= 0:
                raise self._fail(f"timed out after {self.start_timeout:.0f}s waiting for {what}", logs)
            time.sleep(0.05)

    def _check(self, args: list[str], what: str, logs: Iterable[Path] = ()) -> str:
        try:
            proc = self.run(args, timeout=max(self._remaining(), 1.0), cwd=self.run_dir)
        except subprocess.TimeoutExpired as exc:
            raise self._fail(f"{what}: timed out ({' '.join(args)})", logs) from exc
        if proc.returncode != 0:
            raise self._fail(
                f"{what} failed ({proc.returncode}): {' '.join(args)}\n{proc.stdout}{proc.stderr}", logs
            )
        return proc.stdout

    def _start_munge(self) -> None:
        key = self.munge_dir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        # munged runs as root here: SlurmUser is root and it avoids making the base dir readable by munge.
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_dir / 'munged.pid'}",
                f"--seed-file={self.munge_dir / 'munged.seed'}",
                f"--log-file={self.log_dir / 'munged.log'}",
                "--num-threads=4",
            ],
        )

    def _start_mariadb(self) -> None:
        out = self.log_dir / "mariadb.out"
        self._check(
            [
                "mariadb-install-db",
                "--no-defaults",
                "--user=root",
                f"--datadir={self.mysql_dir}",
                "--skip-test-db",
                "--auth-root-authentication-method=socket",
                "--innodb-log-file-size=8M",
            ],
            "mariadb-install-db",
        )
        init = self.run_dir / "mariadb-init.sql"
        init.write_text(
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';\n"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n"
        )
        self._spawn(
            "mariadbd",
            [
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={self.mysql_dir}",
                f"--socket={self.mysql_socket}",
                f"--pid-file={self.run_dir / 'mariadbd.pid'}",
                f"--port={self.mysql_port}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--skip-log-bin",
                f"--init-file={init}",
                "--innodb-log-file-size=8M",
                "--innodb-buffer-pool-size=64M",
                # Throwaway data: durability only costs start time (slurmdbd creates ~40 tables).
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-doublewrite=0",
                "--innodb-lock-wait-timeout=900",
            ],
        )
        self._wait_for("MariaDB", lambda: _port_open(self.mysql_port), "mariadbd", [out])

    def _node_hardware(self) -> dict[str, str]:
        text = self._check(["slurmd", "-C"], "slurmd -C")
        hw = dict(re.findall(r"(\w+)=(\S+)", text.splitlines()[0]))
        wanted = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
        missing = [k for k in wanted if k not in hw]
        if missing:
            raise ClusterError(f"slurmd -C lacks {missing}: {text}")
        real = int(hw["RealMemory"])
        hw["RealMemory"] = str(max(256, real - max(MEMORY_HEADROOM_MB, real // 20)))
        return {k: hw[k] for k in wanted}

    def _write_configs(self, hw: Mapping[str, str]) -> None:
        c = self.conf_dir
        if self.job_submit_lua is not None:
            (c / "job_submit.lua").write_text(self.job_submit_lua)
            self._job_submit_mtime = (c / "job_submit.lua").stat().st_mtime
        for name, text in self.extra_conf_files.items():
            target = c / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if self.cpus_per_node is not None:
            n = str(self.cpus_per_node)
            shape = {"Boards": "1", "SocketsPerBoard": "1", "CoresPerSocket": n, "ThreadsPerCore": "1"}
            hw = {**hw, "CPUs": n, **shape}
        hw_text = " ".join(f"{k}={v}" for k, v in hw.items())
        node_lines = "\n".join(
            f"NodeName={n} NodeHostname={self.hostname} NodeAddr=127.0.0.1 Port={p} {hw_text} State=UNKNOWN"
            for n, p in self.slurmd_ports.items()
        )
        nodes = ",".join(self.node_names)
        # The first partition is the default one.
        partitions = "\n".join(
            f"PartitionName={p} Nodes={nodes} MaxTime=INFINITE State=UP" + (" Default=YES" if i == 0 else "")
            for i, p in enumerate(PARTITIONS)
        )
        plugin_line = "JobSubmitPlugins=lua\n" if self.job_submit_lua is not None else ""
        sock = self.munge_socket
        self.slurm_conf.write_text(
            f"""# Generated by tests/e2e/cluster.py
ClusterName={CLUSTER_NAME}
SlurmctldHost={self.hostname}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={next(iter(self.slurmd_ports.values()))}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={self.state_dir}
SlurmdSpoolDir={self.spool_dir}/%n
SlurmctldPidFile={self.run_dir}/slurmctld.pid
SlurmdPidFile={self.run_dir}/slurmd.%n.pid
SlurmctldLogFile={self.log_dir}/slurmctld.log
SlurmdLogFile={self.log_dir}/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
MailProg=/bin/true
DefMemPerCPU=512
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# Start submitted batch jobs at the next scheduler tick instead of up to 3 s later.
SchedulerParameters=batch_sched_delay=0{"," + self.scheduler_parameters if self.scheduler_parameters else ""}
{"SlurmdParameters=config_overrides" if self.cpus_per_node is not None else ""}
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=30
SlurmdTimeout=300
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={self.dbd_port}
AccountingStoragePass=socket={sock}
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
{plugin_line}{node_lines}
{partitions}
{self.slurm_conf_extra}
"""
        )
        dbd_conf = c / "slurmdbd.conf"
        fd = os.open(dbd_conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(
                f"""# Generated by tests/e2e/cluster.py
AuthType=auth/munge
AuthInfo=socket={sock}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
DebugLevel=info
LogFile={self.log_dir}/slurmdbd.log
PidFile={self.run_dir}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.mysql_port}
StorageUser=slurm
StoragePass={DB_PASSWORD}
StorageLoc=slurm_acct_db
"""
            )

    def _start_slurmdbd(self) -> None:
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        logs = [self.log_dir / "slurmdbd.log", self.log_dir / "slurmdbd.out", self.log_dir / "mariadbd.out"]
        self._wait_for("slurmdbd", lambda: _port_open(self.dbd_port), "slurmdbd", logs)

    def _add_associations(self) -> None:
        logs = [self.log_dir / "slurmdbd.log", self.log_dir / "munged.out"]
        self._check(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], "sacctmgr add cluster", logs)
        self._check(
            ["sacctmgr", "-i", "add", "account", ",".join(ACCOUNTS), f"cluster={CLUSTER_NAME}"],
            "sacctmgr add account",
            logs,
        )
        self._check(
            [
                "sacctmgr",
                "-i",
                "add",
                "user",
                "root",
                f"account={','.join(ACCOUNTS)}",
                f"defaultaccount={DEFAULT_ACCOUNT}",
                f"cluster={CLUSTER_NAME}",
            ],
            "sacctmgr add user",
            logs,
        )

    def _start_slurmctld(self) -> None:
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.slurm_conf)])
        logs = [self.log_dir / "slurmctld.log", self.log_dir / "slurmctld.out"]
        # scontrol ping rather than a bare connect, which slurmctld would log as an error.
        self._wait_for("slurmctld", self._controller_up, "slurmctld", logs)

    def _controller_up(self) -> bool:
        try:
            proc = self.run(["scontrol", "ping"], timeout=5, cwd=self.run_dir)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0 and " is UP" in proc.stdout

    def _node_states(self) -> dict[str, str]:
        proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10, cwd=self.run_dir)
        if proc.returncode != 0:
            return {}
        states: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            name, _, state = line.partition(" ")
            states[name] = state.strip()
        return states

    def _wait_nodes_idle(self) -> None:
        logs = [self.log_dir / "slurmctld.log"]
        logs += [self.log_dir / f"slurmd.{n}.log" for n in self.node_names]
        logs += [self.log_dir / f"slurmd.{n}.out" for n in self.node_names]
        last: dict[str, str] = {}

        def idle() -> bool:
            nonlocal last
            last = self._node_states()
            return all(last.get(n) == "idle" for n in self.node_names)

        while not idle():
            for name in [f"slurmd.{n}" for n in self.node_names] + ["slurmctld"]:
                if self._procs[name].poll() is not None:
                    raise self._fail(f"{name} died before the nodes became idle (states {last})", logs)
            if self._remaining() <= 0:
                raise self._fail(f"nodes not idle after {self.start_timeout:.0f}s (states {last})", logs)
            time.sleep(0.1)

    # ---- stop ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every daemon and any job process of this cluster (TERM, then KILL). Idempotent."""
        # Jobs first: a slurmstepd whose daemons are gone retries for seconds before it gives up.
        self._kill_strays()
        procs = self._procs
        self._procs = {}
        # Slurm daemons before the database and munge they report to, else they retry on shutdown.
        slurm = [n for n in procs if n.startswith(("slurmd.", "slurmctld"))]
        stages = [slurm, ["slurmdbd"], [n for n in procs if n not in slurm and n != "slurmdbd"]]
        for stage in stages:
            _terminate([procs[n] for n in stage if n in procs], grace=10.0)
        self._kill_strays()
        for out in self._outputs:
            out.close()
        self._outputs = []
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    def _stray_pids(self) -> list[int]:
        """slurmstepd and job processes outlive slurmd; they carry this cluster's SLURM_CONF."""
        marker = f"SLURM_CONF={self.slurm_conf}".encode()
        pids = []
        daemons = {p.pid for p in self._procs.values()}
        me = os.getpid()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in (me, *daemons):
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            # Only job processes and their slurmstepd: a tool a test started with self.env is not ours.
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

    def _job_diagnostics(self, job_id: int) -> str:
        out = self.jobs_dir / f"slurm-{job_id}.out"
        return "\n".join([_tail(out, 20), self.log_tails(20)])


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


def parse_scontrol_record(text: str) -> dict[str, str]:
    """Parse one ``scontrol show`` record.

    Fields are ``Key=Value`` separated by spaces, except that scontrol prints free-text fields (which
    may contain spaces) alone on their line: such a line becomes one field.
    """
    record: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if sep and key in _FREE_TEXT_KEYS:
            record[key] = value
            continue
        for token in re.split(r" (?=[A-Za-z][\w:/.\-]*=)", line):
            k, sep, v = token.partition("=")
            if sep:
                record[k] = v
    return record


_FREE_TEXT_KEYS = frozenset(
    {"Comment", "AdminComment", "Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Reason", "SystemComment"}
)
