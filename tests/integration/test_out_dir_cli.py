"""`harp report`, `harp evaluate` and `harp simulate` run as root with ``--out`` in a directory a
user may write: the user's links, planted above it or swapped in while the command computes, never
send a file elsewhere (slurm_harp.output_dir)."""

from __future__ import annotations

import errno
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_harp import output_dir
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.cli import main
from tests.conftest import BUNDLED_TRACE
from tests.unit.test_site_report import JOBS

NOBODY = 65534
TRACE = "KTH-SP2-1996-2.1-cln"
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def job_store(work: Path) -> Path:
    db = work / "jobs.db"
    with JobStore(db) as store:
        store.merge(JOBS, "slurm")
    return db


# command -> (its arguments but --out, the function it computes in: the swap's moment)
def argv_of(command: str, work: Path) -> list[str]:
    return {
        "report": ["report", "--db", str(job_store(work)), "--since", "2026-09-21"],
        "evaluate": ["evaluate", str(BUNDLED_TRACE), "--max-jobs", "2000", "--target", "time",
                     "--strategies", "request"],
        "simulate": ["simulate", str(BUNDLED_TRACE), "--max-jobs", "500", "--limits", "request"],
    }[command]  # fmt: skip


COMPUTING = {
    "report": "slurm_harp.commands.report.site_report",
    "evaluate": "slurm_harp.evaluation.runner.evaluate_target",
    "simulate": "slurm_harp.simulation.simulate",
}
WRITES = {"report": "index.html", "evaluate": f"{TRACE}.md", "simulate": f"{TRACE}-easy.md"}


def victim_dir(work: Path) -> Path:
    """A directory of root's holding a file of each name the commands write."""
    victim = work / "victim"
    victim.mkdir()
    for name in WRITES.values():
        (victim / name).write_text("root's file\n")
    return victim


def untouched(victim: Path) -> bool:
    names = sorted(p.name for p in victim.iterdir())
    return names == sorted(WRITES.values()) and all(
        p.read_text() == "root's file\n" for p in victim.iterdir()
    )


def as_nobody(link: Path) -> None:
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)


@pytest.mark.parametrize("command", ["report", "evaluate", "simulate"])
def test_a_link_swapped_in_while_computing_gets_nothing(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --out was checked when the command began; the user who may write beside it moves it away
    # and puts a link at its name, to root's directory. Before, the files were written there.
    victim, out = victim_dir(tmp_path), tmp_path / "shared" / "out"
    out.mkdir(parents=True)
    argv = argv_of(command, tmp_path)
    module, name = COMPUTING[command].rsplit(".", 1)
    computing: Callable[..., object] = getattr(importlib.import_module(module), name)

    def swap_then_compute(*args: object, **kwargs: object) -> object:
        if not out.is_symlink():
            out.rename(out.with_name("moved"))
            out.symlink_to(victim)
            as_nobody(out)
        return computing(*args, **kwargs)

    monkeypatch.setattr(importlib.import_module(module), name, swap_then_compute)
    assert main([*argv, "--out", str(out)]) == 0
    assert untouched(victim)
    assert (tmp_path / "shared" / "moved" / WRITES[command]).is_file()


@pytest.mark.parametrize("command", ["report", "evaluate", "simulate"])
def test_input_names_not_utf8_are_written_with_question_marks(command: str, tmp_path: Path) -> None:
    """A trace, a job store's directory or a configuration named in bytes that are not UTF-8 (held
    as surrogates) ended each command in a traceback after all its work: UTF-8 of the page, the
    table or a plot's title (matplotlib draws no surrogate), or the store's URI (urllib's quote).
    Each such byte is "?" in what is written, core.text's rule."""
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/\xfd"))
    odd.mkdir()
    if command == "report":
        config = odd / os.fsdecode(b"\xfe.toml")
        config.write_text("")
        store = job_store(odd)
        argv = ["report", "--db", str(store), "--since", "2026-09-21", "--config", str(config)]
    else:
        trace = odd / os.fsdecode(b"\xff.swf.gz")
        trace.symlink_to(BUNDLED_TRACE)
        argv = [str(trace) if a == str(BUNDLED_TRACE) else a for a in argv_of(command, tmp_path)]
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 0
    written = {"report": "index.html", "evaluate": "?.md", "simulate": "?-easy.md"}[command]
    text = (out / written).read_text(encoding="utf-8")  # strict: no byte of the names' own
    assert ("?/?.toml" if command == "report" else "?") in text


@pytest.mark.parametrize("command", ["report", "evaluate", "simulate"])
def test_another_users_link_above_out_is_refused(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The user links a name in their directory to root's directories: `--out ~user/srv/victim`
    # is root's own directory. Before, only --out itself was checked, and it is no link.
    victim = victim_dir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "srv").symlink_to(tmp_path)
    if os.geteuid() == 0:
        as_nobody(home / "srv")
    else:
        monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)
    assert main([*argv_of(command, tmp_path), "--out", str(home / "srv" / "victim")]) == 2
    said = capsys.readouterr().out + caplog.text  # report prints, evaluate and simulate log
    assert f"--out {home / 'srv'} is a symbolic link owned by uid" in said
    assert untouched(victim)


FIRST_WRITTEN = {"report": "modes.png", "evaluate": f"{TRACE}.json", "simulate": f"{TRACE}-easy.json"}


@pytest.mark.parametrize("command", ["report", "evaluate", "simulate"])
def test_a_file_that_cannot_be_written_is_named_exit_2(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A full disk, or an --out the caller may enter but not write: each command ended in an
    OSError traceback (exit 1, after all its work), naming a temporary file or nothing."""

    def disk_full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output_dir, "replace_at", disk_full)
    out = tmp_path / "out"
    assert main([*argv_of(command, tmp_path), "--out", str(out)]) == 2
    said = capsys.readouterr().out + caplog.text  # report prints, evaluate and simulate log
    assert f"cannot write {out / FIRST_WRITTEN[command]}: No space left on device" in said
    assert not out.exists()  # made for the command, and left empty: removed


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A directory of nobody's under one root's and others may enter (not pytest's 0700 tmp_path)."""
    top = Path(tempfile.mkdtemp(prefix="harp-out-"))
    top.chmod(0o755)
    home = top / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    try:
        yield home
    finally:
        shutil.rmtree(top)


# Run as nobody by the system's Python (the test's may be unreadable to nobody): swap the names
# `out` (nobody's directory) and `link` (nobody's link to root's directory) atomically, for good.
FLIPPER = """
import ctypes, os, sys
os.chdir(sys.argv[1])
os.mkdir("out")
os.symlink(sys.argv[2], "link")
libc = ctypes.CDLL(None, use_errno=True)
while True:
    libc.renameat2(-100, b"out", -100, b"link", 2)  # AT_FDCWD, RENAME_EXCHANGE
"""


def report_as_root(db: Path, out: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "slurm_harp.cli", "report", "--db", str(db), "--since", "2026-09-21"]
    return subprocess.run(
        [*argv, "--out", str(out)], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="root and setpriv")
def test_root_reports_into_a_users_directory_while_the_user_swaps_links(user_home: Path) -> None:
    # `harp report` as root, a process, while nobody's process flips `out` between their
    # directory and a link to root's, as fast as it can.
    victim, db = victim_dir(user_home.parent), job_store(user_home.parent)
    flipper = subprocess.Popen([*SETPRIV, "/usr/bin/python3", "-c", FLIPPER, str(user_home), str(victim)])
    try:
        while not (user_home / "link").is_symlink() and flipper.poll() is None:
            time.sleep(0.01)
        codes = [report_as_root(db, user_home / "out").returncode for _ in range(4)]
        assert flipper.poll() is None, "the flipper ended: no race was run"
    finally:
        flipper.kill()
        flipper.wait()
    assert set(codes) <= {0, 2} and untouched(victim)
    # Whichever name nobody's directory has now: it holds the page if a run wrote it, theirs.
    real = next(user_home / n for n in ("out", "link") if not (user_home / n).is_symlink())
    if 0 in codes:
        assert (real / "index.html").stat().st_uid == NOBODY  # owned like its directory
    # The link planted for good: refused, naming it.
    if real.name == "out":
        real.rename(user_home / "moved")
        (user_home / "link").rename(user_home / "out")
    proc = report_as_root(db, user_home / "out")
    assert proc.returncode == 2
    assert f"--out {user_home / 'out'} is a symbolic link owned by uid {NOBODY}" in proc.stdout
    assert untouched(victim)
