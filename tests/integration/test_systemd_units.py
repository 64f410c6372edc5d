"""The shipped systemd units are hardened (systemd-analyze's exposure below 2), what the units
forbid does not break harp (training and serving run under both forms of MemoryDenyWriteExecute:
the kernel's PR_SET_MDWE, where the kernel has it, Linux 6.3+, and systemd's seccomp filter, which
Debian 12's systemd 252 always uses; so does the daemon's advice process, a Python of its own), and
the timers and commands are the ones docs/install.md describes."""

from __future__ import annotations

import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.server.peer_relay import peer_credentials
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


# What makes systemd start (or keep up) another unit along with this one; After= only orders them.
PULLING_IN = re.compile(r"^(Wants|Requires|Requisite|BindsTo|Upholds)=(.*)$", re.M)
ROLE_UNITS = REPO / "deploy" / "ansible" / "roles" / "slurm_harp" / "templates" / "systemd"
SHIPPED_AND_TEMPLATES = [*UNITS, *sorted(ROLE_UNITS.glob("*.service.j2"))]


@pytest.mark.parametrize("unit", SHIPPED_AND_TEMPLATES, ids=[u.name for u in SHIPPED_AND_TEMPLATES])
def test_the_units_start_no_service_but_their_own(unit: Path) -> None:
    """Wants=slurmctld.service in the guard's unit started slurmctld with each start of the guard
    (Restart=always, a restart by the role's handlers), one an admin had stopped for maintenance
    included. The guard needs no slurmctld to run: its polls fail and are tried again."""
    own = {p.name for p in (REPO / "deploy" / "systemd").iterdir()}
    for _key, names in PULLING_IN.findall(unit.read_text()):
        assert set(names.split()) <= own, (unit.name, names)


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


# Both tests run this: the demo trains LightGBM, exports it to ONNX, serves it over gRPC and replays.
WORK = ["demo", "--show", "1"]


def assert_the_work_ran(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rewritten" in done.stdout  # the replay's summary: it got through training and serving


def test_training_and_serving_work_without_writable_executable_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-c", UNDER_MDWE, *WORK],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode == 77:
        pytest.skip("the kernel has no PR_SET_MDWE (Linux < 6.3): see the seccomp test below")
    assert_the_work_ran(done)


# Where systemd or the kernel lacks PR_SET_MDWE (always with Debian 12's systemd 252),
# MemoryDenyWriteExecute= is a seccomp filter, stricter than the kernel's rule: it refuses, with
# EPERM, mmap with PROT_WRITE and PROT_EXEC both set, mprotect and pkey_mprotect with PROT_EXEC at
# all (even on a mapping already executable, or the stack glibc makes executable for a library
# that asks for one: such a library fails to load), and shmat with SHM_EXEC (systemd's
# src/shared/seccomp-util.c, seccomp_memory_deny_write_execute()). The filter below is that one,
# for this machine's native architecture: numbers from the kernel's unistd.h and audit.h.
PROT_WRITE, PROT_EXEC, SHM_EXEC = 0x2, 0x4, 0o100000
ARCHES = {  # platform.machine(): AUDIT_ARCH_*, then the numbers of mmap, mprotect, pkey_mprotect, shmat
    "x86_64": (0xC000003E, 9, 10, 329, 30),
    "aarch64": (0xC00000B7, 222, 226, 288, 196),
}
# classic BPF opcodes (linux/filter.h) and seccomp's return values (linux/seccomp.h)
LD_W_ABS, ALU_AND_K, JEQ_K, JSET_K, RET_K = 0x20, 0x54, 0x15, 0x45, 0x06
RET_ALLOW, RET_EPERM = 0x7FFF0000, 0x00050000 | 1
# struct seccomp_data: nr at 0, arch at 4, args[] from 16, 8 bytes each; the low half of an argument
# comes first on these little-endian machines, and the bits tested are all in it.
NR, ARCH, ARG2 = 0, 4, 16 + 2 * 8


def memory_deny_write_execute_filter(arch: str) -> bytes:
    """systemd's MemoryDenyWriteExecute= filter as a BPF program (struct sock_filter[])."""
    audit_arch, mmap_nr, mprotect_nr, pkey_mprotect_nr, shmat_nr = ARCHES[arch]
    # (opcode, k, label if true, label if false); labels name the instruction after them.
    code: list[tuple[int, int, str, str] | str] = [
        (LD_W_ABS, ARCH, "", ""),
        # Another architecture's calls pass, as under systemd, whose per-architecture filters let
        # them through (and SystemCallArchitectures=native refuses them).
        (JEQ_K, audit_arch, "", "allow"),
        (LD_W_ABS, NR, "", ""),
        (JEQ_K, mmap_nr, "write_and_exec", ""),
        (JEQ_K, mprotect_nr, "exec", ""),
        (JEQ_K, pkey_mprotect_nr, "exec", ""),
        (JEQ_K, shmat_nr, "shm_exec", "allow"),
        "write_and_exec",
        (LD_W_ABS, ARG2, "", ""),
        (ALU_AND_K, PROT_WRITE | PROT_EXEC, "", ""),
        (JEQ_K, PROT_WRITE | PROT_EXEC, "deny", "allow"),
        "exec",
        (LD_W_ABS, ARG2, "", ""),
        (JSET_K, PROT_EXEC, "deny", "allow"),
        "shm_exec",
        (LD_W_ABS, ARG2, "", ""),
        (JSET_K, SHM_EXEC, "deny", "allow"),
        "deny",
        (RET_K, RET_EPERM, "", ""),
        "allow",
        (RET_K, RET_ALLOW, "", ""),
    ]
    at: dict[str, int] = {}
    program: list[tuple[int, int, str, str]] = []
    for item in code:
        if isinstance(item, str):
            at[item] = len(program)
        else:
            program.append(item)
    # A jump's offsets count the instructions it skips; "" is the next one.
    return b"".join(
        struct.pack("=HBBI", op, at[yes] - pc - 1 if yes else 0, at[no] - pc - 1 if no else 0, k)
        for pc, (op, k, yes, no) in enumerate(program)
    )


# Installs the filter given in hex, as systemd does before it starts a unit's command (no new
# privileges, which an unprivileged process needs for a filter), then execs the Python that runs
# the work: all of that process, from its loader on, runs under the filter.
INSTALL_FILTER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
code = bytes.fromhex(sys.argv[1])
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
program = Program(len(code) // 8, code)
if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
    sys.exit(f"PR_SET_NO_NEW_PRIVS: {os.strerror(ctypes.get_errno())}")
if libc.prctl(22, 2, ctypes.addressof(program), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    sys.exit(f"PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}")
os.execv(sys.executable, [sys.executable, "-c", *sys.argv[2:]])
"""

# Under the filter: first prove it is there, each call refused with EPERM (a plain W+X mmap and an
# exec mprotect succeed without it, shmat on no segment fails with EINVAL), and that it lets
# through what is not executable; then run harp. argv[1] is pkey_mprotect's number.
UNDER_FILTER = """
import ctypes, errno, mmap, os, sys
from ctypes import c_int, c_size_t, c_void_p
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.argtypes = [c_void_p, c_size_t, c_int, c_int, c_int, ctypes.c_long]
libc.mprotect.argtypes = [c_void_p, c_size_t, c_int]
libc.shmat.argtypes = [c_int, c_void_p, c_int]
libc.mmap.restype = libc.shmat.restype = c_void_p
libc.syscall.restype = ctypes.c_long
FAILED = c_void_p(-1).value
R, W, X = mmap.PROT_READ, mmap.PROT_WRITE, mmap.PROT_EXEC
def allowed(what, ok):
    if not ok:
        sys.exit(f"{what} was refused: {os.strerror(ctypes.get_errno())}")
def refused(what, failed):
    if not failed:
        sys.exit(f"{what} was allowed")
    if ctypes.get_errno() != errno.EPERM:
        sys.exit(f"{what} failed with {os.strerror(ctypes.get_errno())}, not EPERM")
def anonymous(prot):
    return libc.mmap(None, 4096, prot, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
refused("mmap(PROT_WRITE|PROT_EXEC)", anonymous(R | W | X) == FAILED)
page = anonymous(R | W)
allowed("mmap(PROT_READ|PROT_WRITE)", page != FAILED)
allowed("mprotect(PROT_READ)", libc.mprotect(page, 4096, R) == 0)
refused("mprotect(PROT_EXEC)", libc.mprotect(page, 4096, R | X) != 0)
pkey_mprotect = ctypes.c_long(int(sys.argv[1]))
refused("pkey_mprotect(PROT_EXEC)", libc.syscall(pkey_mprotect, c_void_p(page), 4096, R | X, -1) != 0)
refused("shmat(SHM_EXEC)", libc.shmat(-1, None, 0o100000) == FAILED)
from slurm_harp.cli import main
sys.exit(main(sys.argv[2:]))
"""


def under_filter(*argv: str) -> list[str]:
    """The command that runs ``harp *argv`` under systemd's MemoryDenyWriteExecute filter."""
    arch = platform.machine()
    if arch not in ARCHES or sys.byteorder != "little":
        pytest.skip(f"no MemoryDenyWriteExecute filter written for {arch} ({sys.byteorder}-endian)")
    program = memory_deny_write_execute_filter(arch).hex()
    return [sys.executable, "-c", INSTALL_FILTER, program, UNDER_FILTER, str(ARCHES[arch][3]), *argv]


def test_training_and_serving_work_under_systemds_seccomp_filter() -> None:
    done = subprocess.run(under_filter(*WORK), capture_output=True, text=True, timeout=600, check=False)
    assert_the_work_ran(done)


def test_the_advice_process_serves_under_systemds_seccomp_filter() -> None:
    """`harp serve` starts the advice's process (server/advice_process.py) as a new Python, which
    the demo above never starts: it inherits the unit's filter, and must still serve."""
    work = Path(tempfile.mkdtemp(prefix="harp-sandbox-"))
    config = work / "harp.toml"
    config.write_text(
        f'[server]\nsocket = "{work / "harp.sock"}"\n[store]\npath = "{work / "store"}"\n'
        f'[advice]\nsocket = "{work / "advice.sock"}"\n'
    )
    daemon = subprocess.Popen(
        under_filter("serve", "--config", str(config)), stderr=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        child = advice_process(work / "advice.sock", daemon)
        status = Path(f"/proc/{child}/status").read_text()
        assert re.search(r"^Seccomp:\s+2$", status, re.M), status  # under a filter, inherited
        assert b"slurm_harp.server.advice_child" in Path(f"/proc/{child}/cmdline").read_bytes()
        with grpc.insecure_channel(f"unix:{work / 'advice.sock'}") as channel:
            ask = pb.AdviceRequest(job=pb.SubmitRequest(job_name="sim", min_cpus=2))
            advice = pb_grpc.AdvisorStub(channel).Advise(ask, timeout=30)
        assert advice.user_name and "no partition is known" in str(advice), advice
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, errors = daemon.communicate(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    assert daemon.returncode == 0 and "Traceback" not in errors, errors[-3000:]


def advice_process(sock: Path, daemon: subprocess.Popen[str]) -> int:
    """The pid of the process that answers at ``sock`` (SO_PEERCRED), once it does."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert daemon.poll() is None, daemon.communicate()[1][-3000:]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(str(sock))
            except OSError:
                time.sleep(0.1)
                continue
            return peer_credentials(conn).pid
    raise AssertionError(f"nothing answers at {sock}")


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
