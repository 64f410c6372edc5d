"""The shipped systemd units are hardened (systemd-analyze's exposure below 2), and what the units
forbid does not break harp: training and serving run under MemoryDenyWriteExecute."""

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
        pytest.skip("the kernel has no PR_SET_MDWE (Linux < 6.3)")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rewritten" in done.stdout  # trained LightGBM -> ONNX, served over gRPC, replayed
