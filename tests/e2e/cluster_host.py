"""What a test cluster asks of this machine, and the errors a cluster raises.

The daemons and jobs run as root (SlurmUser=root), from the Slurm, munge and MariaDB programs on the
PATH or in the sbin directories; a machine without them cannot host a cluster at all.
"""

from __future__ import annotations

import os
import shutil

DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db")
CLIENTS = ("sbatch", "sacct", "sacctmgr", "scontrol", "sinfo", "squeue", "scancel")


class ClusterError(RuntimeError):
    """The cluster could not be started or did not behave; the message carries the log tails."""


class ClusterUnavailable(ClusterError):
    """This machine cannot host a cluster at all (not root, Slurm/munge/MariaDB not installed)."""


def sbin_path() -> str:
    # Daemons live in /usr/sbin, which a non-login root shell in CI may lack.
    parts = os.environ.get("PATH", "").split(os.pathsep)
    parts += [p for p in ("/usr/local/sbin", "/usr/sbin", "/sbin") if p not in parts]
    return os.pathsep.join(p for p in parts if p)


def unavailable_reason() -> str | None:
    """Why this machine cannot run a cluster, or None if it can."""
    if os.geteuid() != 0:
        return "the e2e cluster runs its daemons and jobs as root (SlurmUser=root); run the tests as root"
    path = sbin_path()
    missing = [b for b in (*DAEMONS, *CLIENTS) if shutil.which(b, path=path) is None]
    if missing:
        return f"missing programs {', '.join(missing)}: run .ci/install-system.sh"
    return None
