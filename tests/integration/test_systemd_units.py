"""The shipped systemd units are hardened (systemd-analyze's exposure below 2), what the units
forbid does not break harp (training and serving run under the kernel's MemoryDenyWriteExecute,
PR_SET_MDWE, where the kernel has it: Linux 6.3+), and the timers and commands are the ones
docs/install.md describes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, required_tool

UNITS = sorted((REPO / "deploy" / "systemd").glob("*.service"))
EXPOSURE = re.compile(r"Overall exposure level for \S+: (\d+\.\d+)")


def systemd_analyze() -> str:
    return required_tool("systemd-analyze", "systemd")


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_units_are_rated_below_2(unit: Path) -> None:
    done = subprocess.run(
        [systemd_analyze(), "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    match = EXPOSURE.search(done.stdout + done.stderr)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) < 2.0, done.stdout


# PR_SET_MDWE (Linux >= 6.3) is the kernel's form of MemoryDenyWriteExecute=: no mapping may be
# writable and executable, nor become executable. The child first proves the rule holds.
UNDER_MDWE = """
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:
    sys.exit(77)
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
except OSError:
    pass
else:
    sys.exit("a writable executable mapping was allowed")
from slurm_harp.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_training_and_serving_work_without_writable_executable_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-c", UNDER_MDWE, "demo", "--show", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode == 77:
        pytest.skip("the kernel has no PR_SET_MDWE (Linux < 6.3): harp untested under MemoryDenyWriteExecute")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rewritten" in done.stdout  # trained LightGBM -> ONNX, served over gRPC, replayed


def unit_values(path: Path, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", path.read_text(), re.M)


def test_the_timers_run_what_and_when_the_install_guide_says() -> None:
    """docs/install.md: the harvest timer runs every N minutes and the nightly one daily, each
    starting the service of its name, whose command is one `harp` takes."""
    from slurm_harp.cli import build_parser

    guide = re.sub(r"\s+", " ", (REPO / "docs" / "install.md").read_text())
    every = re.search(r"`slurm-harp-harvest\.timer` \(every (\d+) minutes\)", guide)
    assert every and "`slurm-harp-nightly.timer` (daily)" in guide
    systemd = REPO / "deploy" / "systemd"
    (span,) = unit_values(systemd / "slurm-harp-harvest.timer", "OnUnitActiveSec")
    done = subprocess.run(
        [systemd_analyze(), "timespan", span], capture_output=True, text=True, timeout=60, check=True
    )
    micro = re.search(r"μs: (\d+)", done.stdout)
    assert micro and int(micro.group(1)) == int(every.group(1)) * 60_000_000, done.stdout
    assert unit_values(systemd / "slurm-harp-nightly.timer", "OnCalendar") == ["daily"]
    for timer in sorted(systemd.glob("*.timer")):
        service = timer.with_suffix(".service")
        assert service.exists(), f"{timer.name} starts {service.name}, which is not shipped"
    for service in sorted(systemd.glob("*.service")):
        (command,) = unit_values(service, "ExecStart")
        program, *argv = command.split()
        assert program == "/opt/slurm-harp/bin/harp", service.name
        build_parser().parse_args(argv)  # exits (a failure) on an option harp does not take
