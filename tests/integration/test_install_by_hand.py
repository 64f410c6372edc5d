"""docs/install.md's pip commands run as a site runs them by hand: the install (step 1), then, after
a `git pull` that deleted a module, the upgrade (Upgrading), each from the same checkout. pip builds
in that checkout, and setuptools packs whatever its build/lib holds: the upgrade installed the deleted
module again. Run into a --target directory, without the dependencies or an isolated build (no
network, no venv): what is under test is what the checkout packs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.unit.test_docs import checkout_installs


def _as_run_here(command: str, checkout: Path, target: Path) -> str:
    """The documented command, on ``checkout``, installing into ``target``."""
    steps = [s for s in command.split(" && ") if not s.startswith("python3 -m venv ")]
    pip = f"{sys.executable} -m pip install --quiet --no-deps --no-build-isolation --target {target} "
    return (
        " && ".join(steps)
        .replace("/opt/slurm-harp/bin/pip install ", pip)
        .replace("/path/to/slurm-harp", str(checkout))
    )


def test_the_documented_upgrade_leaves_out_a_module_deleted_since_the_install(tmp_path: Path) -> None:
    install, upgrade = checkout_installs()  # in the order install.md shows them
    checkout = tmp_path / "slurm-harp"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, checkout / name)
    shutil.copytree(
        REPO / "daemon", checkout / "daemon", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    deleted = checkout / "daemon" / "slurm_harp" / "deleted_since.py"
    deleted.write_text('"""a module of the release installed, gone from the next"""\n')

    def run(command: str, target: Path) -> None:
        done = subprocess.run(
            ["bash", "-c", _as_run_here(command, checkout, target)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]

    run(install, tmp_path / "installed")
    assert (tmp_path / "installed" / "slurm_harp" / "deleted_since.py").exists()
    # What the next build would pack unless it goes first.
    assert (checkout / "build" / "lib" / "slurm_harp" / "deleted_since.py").exists()
    deleted.unlink()  # git pull
    run(upgrade, tmp_path / "upgraded")
    assert (tmp_path / "upgraded" / "slurm_harp" / "cli.py").exists()
    assert not (tmp_path / "upgraded" / "slurm_harp" / "deleted_since.py").exists()
