"""The guard's heartbeat file as the daemon reads it: stale after stale_seconds, a removed file
noticed within RECHECK_SECONDS, one stat() per recheck at most while alive, a beat at once."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_harp.heartbeat import FUTURE_TOLERANCE_S, RECHECK_SECONDS, HeartbeatFile


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(1_800_000_000.0)


def test_alive_until_stale_seconds_after_the_last_beat(tmp_path: Path, clock: Clock) -> None:
    heartbeat = HeartbeatFile(tmp_path / "heartbeat", 30.0, clock)
    assert not heartbeat.alive() and not heartbeat.path.exists()
    heartbeat.beat()
    start = clock.now
    for offset, alive in ((0.0, True), (29.5, True), (30.0, True), (30.25, False), (45.0, False)):
        clock.now = start + offset
        assert heartbeat.alive() is alive, offset
    heartbeat.beat()
    assert heartbeat.alive() and heartbeat.path.stat().st_mtime == clock.now


def test_a_removed_file_is_noticed_within_the_recheck(tmp_path: Path, clock: Clock) -> None:
    heartbeat = HeartbeatFile(tmp_path / "heartbeat", 30.0, clock)
    heartbeat.beat()
    assert heartbeat.alive()
    heartbeat.path.unlink()  # `systemctl stop` removes the guard's runtime directory
    clock.now += RECHECK_SECONDS / 2
    assert heartbeat.alive()  # not read again yet
    clock.now += RECHECK_SECONDS / 2
    assert not heartbeat.alive()


def test_reads_the_file_once_per_recheck(
    tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    heartbeat = HeartbeatFile(tmp_path / "heartbeat", 30.0, clock)
    heartbeat.beat()
    stats = []
    real = os.lstat

    def counted(path: Path, *args: object, **kwargs: object) -> os.stat_result:
        stats.append(path)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "lstat", counted)
    for _ in range(100):
        clock.now += RECHECK_SECONDS / 20
        assert heartbeat.alive()
    assert stats.count(heartbeat.path) == 10  # its time, and who may have written it


def test_a_clock_set_back_reads_the_file_again(tmp_path: Path, clock: Clock) -> None:
    heartbeat = HeartbeatFile(tmp_path / "heartbeat", 30.0, clock)
    heartbeat.beat()
    assert heartbeat.alive()
    heartbeat.path.unlink()
    clock.now -= 5.0
    assert not heartbeat.alive()


def test_a_beat_from_the_future_is_no_beat(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # The clock stepped back an hour just after the guard's last beat, and the guard died: its file
    # counted as fresh for the hour and stale_seconds more, and the daemon went on shortening jobs.
    heartbeat = HeartbeatFile(tmp_path / "heartbeat", 30.0, clock)
    heartbeat.beat()
    clock.now -= 3600.0
    for _ in range(3):
        clock.now += RECHECK_SECONDS
        assert not heartbeat.alive()
    assert [r.getMessage() for r in caplog.records].count(
        f"heartbeat {heartbeat.path} is 3599 s in the future (the clock went back?): the guard counts "
        "as down until it beats again"
    ) == 1
    heartbeat.beat()  # a live guard's next beat, on the new clock
    assert heartbeat.alive()
    clock.now -= FUTURE_TOLERANCE_S  # within the tolerance: still a beat
    heartbeat._seen = None
    assert heartbeat.alive()


OTHER = 65534  # nobody: another user


def beat_of_another(path: Path, clock: Clock) -> None:
    """A fresh heartbeat file at ``path``, as a user who may write there would leave it."""
    path.write_text("")
    os.utime(path, (clock.now, clock.now))


def in_open_directory(mode: int) -> Callable[[Path, Clock], Path]:
    def make(tmp: Path, clock: Clock) -> Path:
        (tmp / "open").mkdir()
        (tmp / "open").chmod(mode)
        beat_of_another(tmp / "open" / "heartbeat", clock)
        return tmp / "open" / "heartbeat"

    return make


def under_open_directory(tmp: Path, clock: Clock) -> Path:
    (tmp / "open").mkdir(mode=0o777)
    (tmp / "open").chmod(0o777)
    (tmp / "open" / "guard").mkdir(mode=0o755)
    beat_of_another(tmp / "open" / "guard" / "heartbeat", clock)
    return tmp / "open" / "guard" / "heartbeat"


def linked(tmp: Path, clock: Clock) -> Path:
    beat_of_another(tmp / "kept-fresh", clock)
    (tmp / "heartbeat").symlink_to(tmp / "kept-fresh")
    return tmp / "heartbeat"


def writable(tmp: Path, clock: Clock) -> Path:
    beat_of_another(tmp / "heartbeat", clock)
    (tmp / "heartbeat").chmod(0o666)
    return tmp / "heartbeat"


def of_another_user(tmp: Path, clock: Clock) -> Path:
    beat_of_another(tmp / "heartbeat", clock)
    os.chown(tmp / "heartbeat", OTHER, OTHER)
    return tmp / "heartbeat"


def under_a_directory_of_another_user(tmp: Path, clock: Clock) -> Path:
    (tmp / "theirs").mkdir()
    (tmp / "theirs" / "guard").mkdir()
    beat_of_another(tmp / "theirs" / "guard" / "heartbeat", clock)
    os.chown(tmp / "theirs", OTHER, OTHER)  # they may rename the guard's directory away
    return tmp / "theirs" / "guard" / "heartbeat"


def their_directory_in_a_sticky_one(tmp: Path, clock: Clock) -> Path:
    """/tmp/harp made by another user before the guard: the guard cannot write there, and the
    directory's owner, trusted as the guard's user, was the one who made it."""
    (tmp / "shared").mkdir()
    (tmp / "shared").chmod(0o1777)
    (tmp / "shared" / "harp").mkdir()
    beat_of_another(tmp / "shared" / "harp" / "heartbeat", clock)
    os.chown(tmp / "shared" / "harp" / "heartbeat", OTHER, OTHER)
    os.chown(tmp / "shared" / "harp", OTHER, OTHER)
    return tmp / "shared" / "harp" / "heartbeat"


AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user")
OPEN = "open on its path is writable by group or others"
UNTRUSTED = [
    pytest.param(in_open_directory(0o777), f"{OPEN} (mode 0777)", id="0777 dir"),
    pytest.param(in_open_directory(0o1777), f"{OPEN} (mode 1777)", id="sticky dir"),
    pytest.param(in_open_directory(0o775), f"{OPEN} (mode 0775)", id="group dir"),
    pytest.param(under_open_directory, f"{OPEN} (mode 0777)", id="0777 above"),
    pytest.param(linked, "is not a regular file (a symbolic link is not followed)", id="link"),
    pytest.param(writable, "is writable by group or others (mode 0666)", id="0666 file"),
    pytest.param(of_another_user, f"is owned by uid {OTHER}, not root", id="their file", marks=AS_ROOT),
    pytest.param(under_a_directory_of_another_user, f"theirs on its path is owned by uid {OTHER}",
                 id="their directory above", marks=AS_ROOT),
    pytest.param(their_directory_in_a_sticky_one, f"is owned by uid {OTHER}, not root",
                 id="their directory in a sticky one", marks=AS_ROOT),
]  # fmt: skip


@pytest.mark.parametrize(("make", "problem"), UNTRUSTED)
def test_a_beat_another_user_could_have_written_is_no_beat(
    tmp_path: Path,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
    make: Callable[[Path, Clock], Path],
    problem: str,
) -> None:
    """`[guard] heartbeat` in a directory others may write in (/tmp, a shared one): any user could
    touch the file, or link it to one they keep fresh, and time_min and extend jobs were shortened
    with no guard to extend them. A fresh but untrusted beat counts as none, logged once."""
    path = make(tmp_path, clock)
    heartbeat = HeartbeatFile(path, 30.0, clock)
    for _ in range(3):
        clock.now += RECHECK_SECONDS
        os.utime(path, (clock.now, clock.now), follow_symlinks=False)
        assert not heartbeat.alive()
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert error.getMessage().startswith(f"heartbeat {path}: ")
    assert problem in error.getMessage() and error.getMessage().endswith("; the guard counts as down")


def test_a_sticky_directory_above_the_guard_s_own_is_trusted(tmp_path: Path, clock: Clock) -> None:
    """/tmp/guard/heartbeat, /tmp sticky and /tmp/guard the guard's: no one else can replace it."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o1777)
    heartbeat = HeartbeatFile(tmp_path / "shared" / "guard" / "heartbeat", 30.0, clock)
    heartbeat.beat()
    assert heartbeat.alive()


def test_a_heartbeat_made_safe_again_counts_again(
    tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    heartbeat = HeartbeatFile(tmp_path / "heartbeat", 30.0, clock)
    heartbeat.beat()
    heartbeat.path.chmod(0o666)
    assert not heartbeat.alive()
    heartbeat.path.chmod(0o644)
    with caplog.at_level(logging.INFO):
        assert heartbeat.alive()
    assert f"heartbeat {heartbeat.path}: trusted again" in caplog.text


def test_a_beat_that_fails_leaves_no_temporary_file(tmp_path: Path, clock: Clock) -> None:
    """mkstemp's file was left when the rename (or anything after mkstemp) failed. The error names
    the heartbeat, not that file: the guard says a problem once, until its text changes."""
    (tmp_path / "hb").mkdir()
    for _ in range(2):
        with pytest.raises(IsADirectoryError) as raised:
            HeartbeatFile(tmp_path / "hb", 30.0, clock).beat()
        assert str(raised.value) == f"[Errno 21] Is a directory: '{tmp_path / 'hb'}'"
    assert [p.name for p in tmp_path.iterdir()] == ["hb"]
