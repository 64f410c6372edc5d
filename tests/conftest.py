from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sqlite3
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.decision import Decision, TargetDecision
from slurm_harp.core.request import Target
from slurm_harp.server import grpc_core

T = TypeVar("T")

# The test servers run with the daemon's grpcio settings (none of the imports above loads grpc).
grpc_core.configure()

REPO = Path(__file__).resolve().parents[1]
BUNDLED_TRACE = REPO / "daemon" / "slurm_harp" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"
LUA_PACKAGES = "apt install lua5.1 lua-cjson lua-socket lua-http lua-cqueues lua-posix"


def required_here() -> bool:
    """Whether tests that need a system tool must run: in CI, where .ci/run sets
    HARP_REQUIRE_CLUSTER=1 (a missing tool fails the run there instead of skipping)."""
    return os.environ.get("HARP_REQUIRE_CLUSTER") == "1"


def lua_required() -> bool:
    """Whether the Lua tests must run: as required_here(), or where CI is set (as in most CI
    services), which the Lua gates honoured first."""
    return required_here() or bool(os.environ.get("CI"))


def lua51() -> str:
    """The lua5.1 interpreter, for a module's Lua tests: CI must have it (an error there: see
    lua_required()), a developer's machine may not (the calling module is skipped, naming the packages)."""
    found = shutil.which("lua5.1")
    if found is None:
        if lua_required():
            raise RuntimeError(f"lua5.1 is required in CI ({LUA_PACKAGES})")
        pytest.skip(f"lua5.1 not installed ({LUA_PACKAGES})", allow_module_level=True)
    return found


def required_tool(name: str, package: str) -> str:
    """Path of a system tool a test runs: where it is missing the test is skipped, naming the
    Debian package, except in CI (HARP_REQUIRE_CLUSTER=1), where that is a failure."""
    found = shutil.which(name)
    if found is None:
        if required_here():
            pytest.fail(
                f"{name} is not installed (Debian package {package}; .ci/install-system.sh installs it)"
            )
        pytest.skip(f"{name} is not installed (Debian package {package})")
    return found


SIDE_BY_SIDE = "side_by_side"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--side-by-side",
        choices=("only", "skip"),
        default=None,
        help=f"run only the tests marked {SIDE_BY_SIDE}, or all but them (scripts/test runs both)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    which = config.getoption("--side-by-side")
    if which is None:
        return
    keep = which == "only"
    chosen: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (chosen if (item.get_closest_marker(SIDE_BY_SIDE) is not None) == keep else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = chosen


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Make a report sendable by pytest-xdist (scripts/test), which encodes it as strict UTF-8: a
    test of non-UTF-8 names captures surrogate-escaped text, and one such report ended the run."""
    report.sections = [(title, _utf8(content)) for title, content in report.sections]
    if report.failed and report.longrepr is not None:
        text = str(report.longrepr)
        if _utf8(text) != text:
            report.longrepr = _utf8(text)


@pytest.fixture
def local_zone() -> Iterator[Callable[[str], None]]:
    """``local_zone(name)`` makes ``name`` (a TZ value) this process's local time zone until the
    test ends."""
    before = os.environ.get("TZ")

    def use(name: str) -> None:
        os.environ["TZ"] = name
        time.tzset()

    yield use
    if before is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = before
    time.tzset()


@pytest.fixture
def lock_out(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], None]]:
    """``lock_out(directory)`` makes ``directory`` one this process may not search nor list, as a
    directory of root's, mode 0700, is for another user, until the test ends (tests/locked_out.py:
    as root, the calls are refused instead)."""
    from tests.locked_out import LockOut

    locked = LockOut(monkeypatch)
    yield locked
    locked.give_back()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A fresh directory of a short path, for a test binding Unix sockets deep in it: a socket's
    path holds 107 bytes, and tmp_path in a pytest-xdist worker (scripts/test) is 40 bytes long
    before the test's own name."""
    path = Path(tempfile.mkdtemp(prefix="harp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def trained_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model store holding a real walltime model trained on a slice of the bundled KTH trace."""
    from slurm_harp.cli import main

    store = tmp_path_factory.mktemp("store")
    code = main(["train", "--source", str(BUNDLED_TRACE), "--store", str(store), "--max-rows", "6000"])
    assert code == 0
    return store


@pytest.fixture
def store_copy(trained_store: Path, tmp_path: Path) -> Path:
    """A test's own copy of ``trained_store``, free to change (promotions, rollbacks, removals)."""
    copy = tmp_path / "store"
    shutil.copytree(trained_store, copy)
    return copy


def store_checksum(store: JobStore) -> str:
    """SHA-256 over every row of the job store's tables: equal before and after a no-op harvest."""
    digest = hashlib.sha256()
    with sqlite3.connect(f"file:{store.path.absolute()}?mode=ro", uri=True) as db:
        for table, key in (("jobs", "source, job_id, submit_time"), ("state", "source")):
            for row in db.execute(f"SELECT * FROM {table} ORDER BY {key}"):
                digest.update(repr(row).encode())
    return digest.hexdigest()


def write_schema_version(path: Path, value: str) -> None:
    """Overwrite the job store's schema_version at ``path``, as a later harp or damage would."""
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (value,))
    db.close()


def for_target(decision: Decision, target: Target) -> TargetDecision | None:
    """The decision's outcome for ``target`` (None when it has none)."""
    return next((t for t in decision.targets if t.target is target), None)


def not_a_file(path: Path, kind: str) -> str:
    """Make ``path`` a "FIFO", a "socket" or a "directory"; what harp says of it when it wants a file.
    A test that makes a FIFO where a file is read sets a timeout: open() would wait for a writer."""
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "socket":
        cwd = Path.cwd()
        os.chdir(path.parent)  # a socket's path must fit in 108 bytes: bound by its name
        try:
            with socket.socket(socket.AF_UNIX) as listener:
                listener.bind(path.name)
        finally:
            os.chdir(cwd)
    else:
        path.mkdir()
    return f"a {kind}, not a regular file"


def raised_within(seconds: float, call: Callable[[], object]) -> BaseException | None:
    """What ``call()`` raised (None: nothing), run in a daemon thread that must end within ``seconds``:
    a call stuck in C (SQLite retries an open() that a signal interrupts, so pytest-timeout cannot
    end it) fails the test instead of hanging the run."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:
            raised.append(exc)
        else:
            raised.append(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert raised, f"still running after {seconds} s"
    return raised[0]


def traced_peak(call: Callable[[], T]) -> tuple[T, int]:
    """What ``call()`` returns, and the most memory Python held for it meanwhile (tracemalloc)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def delimited(text: str, argv: Sequence[str], sep: str = "|") -> str:
    """Saved sacct ``text`` (fields split by ``sep``) as sacct prints it when run with ``argv``'s
    --delimiter (harp gives each run a fresh one: sacct_lines.fresh_delimiter)."""
    given = next((a.split("=", 1)[1] for a in argv if a.startswith("--delimiter=")), "|")
    return text.replace(sep, given)
