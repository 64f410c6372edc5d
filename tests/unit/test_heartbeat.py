"""The guard's heartbeat file as the daemon reads it: stale after stale_seconds, a removed file
noticed within RECHECK_SECONDS, one stat() per recheck at most while alive, a beat at once."""

from __future__ import annotations

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
    assert not heartbeat.alive() and heartbeat.age() is None
    heartbeat.beat()
    start = clock.now
    for offset, alive in ((0.0, True), (29.5, True), (30.0, True), (30.25, False), (45.0, False)):
        clock.now = start + offset
        assert heartbeat.alive() is alive, offset
    heartbeat.beat()
    assert heartbeat.alive() and heartbeat.age() == 0.0


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
    real = Path.stat

    def counted(path: Path, **kwargs: bool) -> object:
        stats.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(Path, "stat", counted)
    for _ in range(100):
        clock.now += RECHECK_SECONDS / 20
        assert heartbeat.alive()
    assert len(stats) == 5


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
