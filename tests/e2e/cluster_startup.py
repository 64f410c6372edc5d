"""The steps that bring up one test cluster's daemons, each waited for within one start deadline.

SlurmCluster.start calls them in order: munged, MariaDB, slurmdbd, the accounting associations
(sacctmgr), slurmctld, then the slurmds until every node is idle. A step that fails or runs out of
time raises ClusterError with the exit status of every daemon that died and the tails of its logs.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.e2e.cluster_config import ACCOUNTS, CLUSTER_NAME, DB_PASSWORD, DEFAULT_ACCOUNT, MEMORY_HEADROOM_MB
from tests.e2e.cluster_daemons import Daemons, tail
from tests.e2e.cluster_host import ClusterError

if TYPE_CHECKING:
    from tests.e2e.cluster import SlurmCluster


def free_ports(count: int) -> list[int]:
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


class Startup:
    """The steps of one start of ``cluster``: they spawn into ``daemons`` and wait until ``deadline``
    (a time.monotonic() value) at the most."""

    def __init__(self, cluster: SlurmCluster, daemons: Daemons, deadline: float) -> None:
        self.cluster = cluster
        self.daemons = daemons
        self.deadline = deadline

    def prepare_dirs(self) -> None:
        c = self.cluster
        for d in (
            c.base_dir,
            c.conf_dir,
            c.log_dir,
            c.run_dir,
            c.jobs_dir,
            c.munge_dir,
            c.state_dir,
            c.spool_dir,
        ):
            d.mkdir(parents=True, exist_ok=True)
            # munged refuses group/world-writable directories on its paths.
            d.chmod(0o755)
        for name in c.node_names:
            (c.spool_dir / name).mkdir(exist_ok=True)

    def _remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _fail(self, what: str, logs: Iterable[Path]) -> ClusterError:
        parts = [what]
        for name, proc in self.daemons.procs.items():
            rc = proc.poll()
            if rc is not None:
                parts.append(f"{name} (pid {proc.pid}) exited with {rc}")
        parts += [tail(p) for p in logs]
        return ClusterError("\n".join(parts))

    def _wait_for(self, what: str, ready: Any, proc_name: str, logs: Iterable[Path]) -> None:
        logs = list(logs)
        while True:
            if ready():
                return
            proc = self.daemons.procs.get(proc_name)
            if proc is not None and proc.poll() is not None:
                raise self._fail(f"{proc_name} died while waiting for {what}", logs)
            if self._remaining() <= 0:
                raise self._fail(
                    f"timed out after {self.cluster.start_timeout:.0f}s waiting for {what}", logs
                )
            time.sleep(0.05)

    def _check(self, args: list[str], what: str, logs: Iterable[Path] = ()) -> str:
        try:
            proc = self.cluster.run(args, timeout=max(self._remaining(), 1.0), cwd=self.cluster.run_dir)
        except subprocess.TimeoutExpired as exc:
            raise self._fail(f"{what}: timed out ({' '.join(args)})", logs) from exc
        if proc.returncode != 0:
            raise self._fail(
                f"{what} failed ({proc.returncode}): {' '.join(args)}\n{proc.stdout}{proc.stderr}", logs
            )
        return proc.stdout

    def start_munge(self) -> None:
        c = self.cluster
        key = c.munge_dir / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        # munged runs as root here: SlurmUser is root and it avoids making the base dir readable by munge.
        self.daemons.spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={c.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={c.munge_dir / 'munged.pid'}",
                f"--seed-file={c.munge_dir / 'munged.seed'}",
                f"--log-file={c.log_dir / 'munged.log'}",
                "--num-threads=4",
            ],
        )

    def start_mariadb(self) -> None:
        c = self.cluster
        out = c.log_dir / "mariadb.out"
        self._check(
            [
                "mariadb-install-db",
                "--no-defaults",
                "--user=root",
                f"--datadir={c.mysql_dir}",
                "--skip-test-db",
                "--auth-root-authentication-method=socket",
                "--innodb-log-file-size=8M",
            ],
            "mariadb-install-db",
        )
        init = c.run_dir / "mariadb-init.sql"
        init.write_text(
            f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}';\n"
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n"
        )
        self.daemons.spawn(
            "mariadbd",
            [
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={c.mysql_dir}",
                f"--socket={c.mysql_socket}",
                f"--pid-file={c.run_dir / 'mariadbd.pid'}",
                f"--port={c.mysql_port}",
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
        self._wait_for("MariaDB", lambda: _port_open(c.mysql_port), "mariadbd", [out])

    def node_hardware(self) -> dict[str, str]:
        text = self._check(["slurmd", "-C"], "slurmd -C")
        hw = dict(re.findall(r"(\w+)=(\S+)", text.splitlines()[0]))
        wanted = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
        missing = [k for k in wanted if k not in hw]
        if missing:
            raise ClusterError(f"slurmd -C lacks {missing}: {text}")
        real = int(hw["RealMemory"])
        hw["RealMemory"] = str(max(256, real - max(MEMORY_HEADROOM_MB, real // 20)))
        return {k: hw[k] for k in wanted}

    def start_slurmdbd(self) -> None:
        c = self.cluster
        logs = [c.log_dir / "slurmdbd.log", c.log_dir / "slurmdbd.out", c.log_dir / "mariadbd.out"]
        self.daemons.spawn("slurmdbd", ["slurmdbd", "-D"])
        try:
            self._wait_for("slurmdbd", lambda: _port_open(c.dbd_port), "slurmdbd", logs)
        except ClusterError as first:
            # Seen once in a suite with four clusters starting at once: slurmdbd's first queries to
            # a MariaDB just up got no result ("We should have gotten a result: 'No error'") and it
            # exited. One more start; a second failure fails the cluster, with both reasons.
            proc = self.daemons.procs.pop("slurmdbd")
            if proc.poll() is None:
                raise
            self.daemons.spawn("slurmdbd", ["slurmdbd", "-D"])
            try:
                self._wait_for("slurmdbd", lambda: _port_open(c.dbd_port), "slurmdbd", logs)
            except ClusterError as again:
                raise ClusterError(f"{again}\n--- its first start:\n{first}") from None

    def add_associations(self) -> None:
        logs = [self.cluster.log_dir / "slurmdbd.log", self.cluster.log_dir / "munged.out"]
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

    def start_slurmctld(self, clean: bool = True) -> None:
        """Start slurmctld: ``clean``, with no jobs (-c); else from its StateSaveLocation."""
        c = self.cluster
        args = ["slurmctld", "-D", *(["-c"] if clean else []), "-f", str(c.slurm_conf)]
        self.daemons.spawn("slurmctld", args)
        logs = [c.log_dir / "slurmctld.log", c.log_dir / "slurmctld.out"]
        # scontrol ping rather than a bare connect, which slurmctld would log as an error.
        self._wait_for("slurmctld", self._controller_up, "slurmctld", logs)

    def start_slurmds(self) -> None:
        c = self.cluster
        for name in c.node_names:
            self.daemons.spawn(f"slurmd.{name}", ["slurmd", "-D", "-N", name, "-f", str(c.slurm_conf)])

    def _controller_up(self) -> bool:
        try:
            proc = self.cluster.run(["scontrol", "ping"], timeout=5, cwd=self.cluster.run_dir)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0 and " is UP" in proc.stdout

    def _node_states(self) -> dict[str, str]:
        proc = self.cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=10, cwd=self.cluster.run_dir)
        if proc.returncode != 0:
            return {}
        states: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            name, _, state = line.partition(" ")
            states[name] = state.strip()
        return states

    def wait_nodes_idle(self) -> None:
        c = self.cluster
        logs = [c.log_dir / "slurmctld.log"]
        logs += [c.log_dir / f"slurmd.{n}.log" for n in c.node_names]
        logs += [c.log_dir / f"slurmd.{n}.out" for n in c.node_names]
        last: dict[str, str] = {}

        def idle() -> bool:
            nonlocal last
            last = self._node_states()
            return all(last.get(n) == "idle" for n in c.node_names)

        while not idle():
            for name in [f"slurmd.{n}" for n in c.node_names] + ["slurmctld"]:
                if self.daemons.procs[name].poll() is not None:
                    raise self._fail(f"{name} died before the nodes became idle (states {last})", logs)
            if self._remaining() <= 0:
                raise self._fail(f"nodes not idle after {c.start_timeout:.0f}s (states {last})", logs)
            time.sleep(0.1)
