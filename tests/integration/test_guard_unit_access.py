"""The guard's unit as the role renders it lets the guard read the conditional extension's history
(jobs.extension.json, in the state directory: the daemon's user and harp.toml's group, 0750), run
with what systemd gives it from that unit: User=, Group=, SupplementaryGroups= and no capabilities
(CapabilityBoundingSet=), here applied by setpriv. Where SlurmUser is root, Group=root: root, with no
capabilities, reads by the file's mode like any user, and the extension was steps only, for good."""

from __future__ import annotations

import grp
import os
import pwd
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_harp.accounting import extension_file
from slurm_harp.core.extension import ConditionalRatios
from tests.conftest import required_tool
from tests.integration.ansible_play import require_root, run_role
from tests.integration.test_ansible_role import tasks_play

# Stands for harp.toml's group (slurm_harp_group where SlurmUser is root): one root is not in.
STATE_GROUP = "daemon"
# What `harp guard` makes of the file (commands/guard.py history_of): exit 3 if it read nothing.
READ = """
import sys
from pathlib import Path
from slurm_harp.guard.extension_history import ExtensionHistory
sys.exit(0 if ExtensionHistory(Path(sys.argv[1])).ratios() is not None else 3)
"""


@pytest.fixture(scope="module")
def root_guard_unit(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The guard's unit the role writes where SlurmUser is root (its group root)."""
    require_root()
    work = tmp_path_factory.mktemp("role")
    play = tasks_play(
        "units",
        __slurm_harp_slurm_user="root",
        __slurm_harp_slurm_group="root",
        __slurm_harp_socket_group=STATE_GROUP,
    )
    variables = {"slurm_harp_systemd_dir": str(work / "units"), "slurm_harp_manage_services": False}
    result = run_role(work / "play", variables, playbook=play)
    assert result.returncode == 0, result.output[-3000:]
    return (work / "units" / "slurm-harp-guard.service").read_text()


def _state_dir(tmp_path: Path) -> Path:
    """The state directory as the role and the harvest leave it, holding an extension file."""
    state = tmp_path / "state"
    state.mkdir()
    db = state / "jobs.sqlite"
    extension_file.write(extension_file.path_for(db), ConditionalRatios([1.5] * 50 + [3.0] * 50), time.time())
    owner, group = pwd.getpwnam("nobody").pw_uid, grp.getgrnam(STATE_GROUP).gr_gid
    for path, mode in ((state, 0o750), (extension_file.path_for(db), 0o640)):
        os.chown(path, owner, group)
        os.chmod(path, mode)
    return extension_file.path_for(db)


def _as_the_unit_runs(unit: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    def values(key: str) -> list[str]:
        return re.findall(rf"^{key}=(.*)$", unit, re.M)

    [user], [group] = values("User"), values("Group")
    assert values("CapabilityBoundingSet") == [""] and values("NoNewPrivileges") == ["true"]
    extra = [grp.getgrnam(g).gr_gid for line in values("SupplementaryGroups") for g in line.split()]
    # systemd: initgroups() of User= with Group=, then SupplementaryGroups= added.
    groups = sorted(set(os.getgrouplist(user, grp.getgrnam(group).gr_gid)) | set(extra))
    setpriv = [
        required_tool("setpriv", "util-linux"),
        f"--reuid={pwd.getpwnam(user).pw_uid}",
        f"--regid={grp.getgrnam(group).gr_gid}",
        f"--groups={','.join(map(str, groups))}",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]
    return subprocess.run([*setpriv, *argv], capture_output=True, text=True, timeout=60, check=False)


def test_a_guard_run_as_root_reads_the_extension_history_by_the_state_directorys_group(
    root_guard_unit: str, tmp_path: Path
) -> None:
    """The unit gave root Group=root and no capabilities: `permission denied ... extending by steps`,
    and `harp_guard_extension_history_jobs` stayed 0, with the default `[guard] extension = conditional`."""
    assert re.findall(r"^SupplementaryGroups=(.*)$", root_guard_unit, re.M) == [STATE_GROUP]
    done = _as_the_unit_runs(root_guard_unit, [sys.executable, "-c", READ, str(_state_dir(tmp_path))])
    assert done.returncode == 0, done.stderr[-2000:]


def test_without_its_group_root_could_not_read_it(root_guard_unit: str, tmp_path: Path) -> None:
    """The same run with the unit's SupplementaryGroups= left out: what the test above guards against."""
    without = re.sub(r"^SupplementaryGroups=.*\n", "", root_guard_unit, flags=re.M)
    done = _as_the_unit_runs(without, [sys.executable, "-c", READ, str(_state_dir(tmp_path))])
    assert done.returncode == 3 and "Permission denied" in done.stderr, done.stderr[-2000:]
