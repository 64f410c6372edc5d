"""Two advice calls are computed at a time (docs/advice.md, "Bounds"): the others wait their turn,
and every one is answered. Four connections, two users' each, over the daemon's real advice socket."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from slurm_harp.advice.recommend import Advice, Ask
from slurm_harp.server.advisor import Advisor
from slurm_harp.server.daemon import Daemon
from tests.integration.as_user import channel_as
from tests.integration.test_advice_socket import NOBODY, ROOT, advise, ask, site

__all__ = ["site"]  # the fixture, imported for pytest


def test_two_advice_calls_are_computed_at_a_time(
    site: tuple[Daemon, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, work = site
    lock, computing, most = threading.Lock(), [0], [0]
    compute = Advisor.advise

    def slowly(self: Advisor, uid: int, request: Ask) -> Advice:
        with lock:
            computing[0] += 1
            most[0] = max(most[0], computing[0])
        time.sleep(0.3)  # long enough for every call to be waiting meanwhile
        with lock:
            computing[0] -= 1
        return compute(self, uid, request)

    monkeypatch.setattr(Advisor, "advise", slowly)
    with ExitStack() as stack:
        channels = [
            stack.enter_context(channel_as(uid, work / "advice.sock"))
            for uid in (ROOT, ROOT, NOBODY.pw_uid, NOBODY.pw_uid)
        ]
        with ThreadPoolExecutor(len(channels)) as pool:
            replies = list(pool.map(lambda channel: advise(channel, ask()), channels))
    assert [r.user_name for r in replies] == ["root", "root", "nobody", "nobody"]
    assert most[0] == 2
