"""Turns at computing advice (docs/advice.md, "Bounds"): two calls at a time, one per user, and
every call is answered; one user's calls, however many and costly, do not hold back another's; a
call whose client left is not computed. Over the advice socket as the daemon's advice process
serves it (served in this process, to count the computations), as real users."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.advice.recommend import Advice, Ask
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.server.advisor import Advisor
from slurm_harp.server.peer_relay import PeerRelay
from tests.integration.as_user import channel_as
from tests.integration.test_advice_socket import (
    NOBODY,
    PARTITIONS,
    ROOT,
    advise,
    ask,
    record,
    served,
    workdir,
)

__all__ = ["served", "workdir"]  # the fixtures, imported for pytest


def test_two_advice_calls_are_computed_at_a_time(
    served: tuple[PeerRelay, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, work = served
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


def heavy(work: Path) -> pb.AdviceRequest:
    """Root's heaviest ask: 1000 runs of "sim" at 100 sizes, over the 64 partitions of a site with
    that many (each named)."""
    line = "PartitionName=p{} MaxNodes=UNLIMITED MaxTime=UNLIMITED TotalCPUs=1024 TotalNodes=8 TRES=cpu=1024"
    scontrol = work / "bin" / "scontrol"
    scontrol.write_text(
        scontrol.read_text().replace(PARTITIONS, "\n".join(line.format(i) for i in range(64)))
    )
    runs = [
        record(100 + i, "root", ROOT, "sim", 1 + i % 100, 6000 // (1 + i % 100) + 60) for i in range(1000)
    ]
    with JobStore(work / "jobs.sqlite") as store:
        store.merge(runs, "sacct")
    return pb.AdviceRequest(job=pb.SubmitRequest(job_name="sim"), partitions=[f"p{i}" for i in range(64)])


def test_one_users_heavy_calls_do_not_hold_back_another_user(
    served: tuple[PeerRelay, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One user's calls, each as costly as a request can make it, sent without pause on every
    # connection the user may hold, and given up at once (the daemon used to compute them all).
    _, work = served
    request, stop = heavy(work), threading.Event()
    lock, begins, ends = threading.Lock(), [], []  # (uid, when) each computation begins, ends
    compute = Advisor.advise

    def noted(self: Advisor, uid: int, asked: Ask) -> Advice:
        with lock:
            begins.append((uid, time.monotonic()))
        try:
            return compute(self, uid, asked)
        finally:
            with lock:
                ends.append((uid, time.monotonic()))

    monkeypatch.setattr(Advisor, "advise", noted)

    def hammer(channel: grpc.Channel) -> None:
        stub = pb_grpc.AdvisorStub(channel)
        while not stop.is_set():
            with contextlib.suppress(grpc.RpcError):
                stub.Advise(request, timeout=0.2)

    with ExitStack() as stack:
        root = [stack.enter_context(channel_as(ROOT, work / "advice.sock")) for _ in range(2)]
        theirs = stack.enter_context(channel_as(NOBODY.pw_uid, work / "advice.sock"))
        assert advise(theirs, ask()).user_name == "nobody"  # its connection open before the load
        started = time.monotonic()
        full = pb_grpc.AdvisorStub(root[0]).Advise(request, timeout=30)
        alone = time.monotonic() - started
        assert sum(o.priced for o in full.options) > 64 * 11  # every partition, at many sizes
        hammers = [threading.Thread(target=hammer, args=(channel,)) for channel in root]
        for thread in hammers:
            thread.start()
        try:
            time.sleep(1.0)
            waits, behind = [], []
            for _ in range(5):
                sent = time.monotonic()
                assert advise(theirs, ask()).user_name == "nobody"
                waits.append(time.monotonic() - sent)
                with lock:  # root's computations that ended while this call waited for its turn
                    begun = next(t for uid, t in begins if uid == NOBODY.pw_uid and t >= sent)
                    behind.append(sum(uid == ROOT and sent <= t < begun for uid, t in ends))
        finally:
            stop.set()
            for thread in hammers:
                thread.join()
    # Root computes one call at a time, so nobody has the other turn at once: its call waits for
    # none of root's to end (first come, first served, both turns were root's: it waited for one
    # at least). One may end by chance while nobody's call reaches its turn. Counted, not timed:
    # the in-process daemon's threads share one interpreter, so a light call's time says little.
    print(f"root's heavy call alone {alone:.2f} s; nobody's calls meanwhile {waits}, behind {behind}")
    assert statistics.median(behind) == 0 and max(behind) <= 1, (behind, alone, waits)
    assert max(waits) < alone + 1.0, (alone, waits)


def test_a_call_whose_client_left_is_not_computed(
    served: tuple[PeerRelay, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, work = served
    computed, compute = [], Advisor.advise

    def slowly(self: Advisor, uid: int, request: Ask) -> Advice:
        computed.append(uid)
        time.sleep(0.5)
        return compute(self, uid, request)

    monkeypatch.setattr(Advisor, "advise", slowly)
    with ExitStack() as stack:
        first, second = (stack.enter_context(channel_as(ROOT, work / "advice.sock")) for _ in range(2))
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(advise, first, ask())
            time.sleep(0.1)  # root's first call is computing: its second waits, and gives up
            with pytest.raises(grpc.RpcError) as gave_up:
                pb_grpc.AdvisorStub(second).Advise(ask(), timeout=0.2)
            assert answer.result().user_name == "root"
        assert isinstance(gave_up.value, grpc.Call)
        assert gave_up.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        time.sleep(0.3)
    assert computed == [ROOT]
