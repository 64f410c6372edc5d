"""The advice socket: any user may open it, and each user is answered from their own jobs alone.

A real daemon (in process) with its real advice socket, served by the daemon's advice process, a
real job store holding two users' runs of the same job name, and a stand-in `scontrol` on PATH.
Calls are made over connections that real processes running as root and as `nobody` opened
(tests/integration/as_user.py): the daemon learns who is calling from the kernel, whatever the
request says. The tests that look inside the relay (its counts, its idle timer) run the code the
advice process runs, serve_advice, in this process (``served``).
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from slurm_harp.config import Settings, parse
from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest
from slurm_harp.server.advice_socket import serve_advice
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.peer_relay import PeerRelay
from tests.integration.as_user import channel_as, connect_as
from tests.integration.h2_peer import ACK, END_HEADERS, HEADERS, PREFACE, SETTINGS, PeerConn, frame, lit

NOBODY = pwd.getpwnam("nobody")
ROOT = 0
NO_SUCH_UID = 54321  # no passwd entry
PARTITIONS = (
    "PartitionName=batch MaxNodes=UNLIMITED MaxTime=UNLIMITED MaxCPUsPerNode=UNLIMITED TotalCPUs=8 "
    "TotalNodes=1 TRES=cpu=8,mem=16000M,node=1,billing=8"
)
SCONTROL = f"""#!/bin/sh
case "$*" in
  *partition*) echo '{PARTITIONS}' ;;
  *config*) echo 'PriorityFlags           = ' ;;
  *) exit 1 ;;
esac
"""

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runs callers as two real users: root only"),
    pytest.mark.alone,  # times itself against the wall clock (scripts/test)
]


def record(job_id: int, user: str, uid: int, name: str, cpus: int, seconds: int) -> JobRecord:
    request = JobRequest(user_name=user, user_id=uid, job_name=name, min_cpus=cpus, submit_time=1000 + job_id)
    return JobRecord(
        job_id=str(job_id), request=request, state="COMPLETED", elapsed_s=seconds, alloc_cpus=cpus,
        end_time=2000 + job_id, max_rss_mb=100.0,
    )  # fmt: skip


# Both users ran "sim". Root: 1 CPU for 20 min, 2 CPUs for 8. Nobody: 4 CPUs for 2 min, 8 for 1
# (were those root's, 8 CPUs would be root's cheapest). Each also ran a job name the other did not.
JOBS = [
    record(1, "root", ROOT, "sim", 1, 1200),
    record(2, "root", ROOT, "sim", 2, 480),
    record(3, "root", ROOT, "root-only", 1, 600),
    record(4, "nobody", NOBODY.pw_uid, "sim", 4, 120),
    record(5, "nobody", NOBODY.pw_uid, "sim", 8, 60),
    record(6, "nobody", NOBODY.pw_uid, "nobody-only", 2, 60),
]


@pytest.fixture
def workdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The site's directory: the stand-in scontrol (on PATH), the job store of JOBS."""
    # Other users must reach the socket: not under pytest's 0700 tmp_path.
    work = Path(tempfile.mkdtemp(prefix="harp-advice-"))
    try:
        work.chmod(0o755)
        bin_dir = work / "bin"
        bin_dir.mkdir()
        (bin_dir / "scontrol").write_text(SCONTROL)
        (bin_dir / "scontrol").chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        with JobStore(work / "jobs.sqlite") as store:
            store.merge(JOBS, "sacct")
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def settings_in(work: Path) -> Settings:
    return parse(
        {
            "server": {"socket": str(work / "harp.sock")},
            "store": {"path": str(work / "store")},
            "history": {"db": str(work / "jobs.sqlite")},
            "advice": {"socket": str(work / "advice.sock"), "max_connections": 8},
        }
    )


@pytest.fixture
def site(workdir: Path) -> Iterator[tuple[Daemon, Path]]:
    daemon = Daemon(settings_in(workdir), CollectorRegistry())
    daemon.start()
    try:
        yield daemon, workdir
    finally:
        daemon.stop(0)


@pytest.fixture
def served(workdir: Path) -> Iterator[tuple[PeerRelay, Path]]:
    """The advice socket as the advice process serves it, in this process: its relay to look into."""
    settings = settings_in(workdir)
    server, relay = serve_advice(workdir / "advice.sock", lambda: settings)
    try:
        yield relay, workdir
    finally:
        relay.stop()
        server.stop(0).wait()


def relay_dir(work: Path) -> Path:
    """The advice relay's private directory in ``work`` (there is one)."""
    (private,) = work.glob(".harp-advice-*")
    return private


def ask(name: str = "sim", **job: object) -> pb.AdviceRequest:
    return pb.AdviceRequest(job=pb.SubmitRequest(job_name=name, **job))  # type: ignore[arg-type]


def advise(channel: grpc.Channel, request: pb.AdviceRequest) -> pb.Advice:
    reply: pb.Advice = pb_grpc.AdvisorStub(channel).Advise(request, timeout=10)
    return reply


def refusal(request: pb.AdviceRequest | bytes, channel: grpc.Channel) -> tuple[grpc.StatusCode, str]:
    """The status and message of an Advise call that fails."""
    call = channel.unary_unary("/harp.v1.Advisor/Advise", request_serializer=None, response_deserializer=None)
    data = request if isinstance(request, bytes) else request.SerializeToString()
    with pytest.raises(grpc.RpcError) as failed:
        call(data, timeout=10)
    error = failed.value
    assert isinstance(error, grpc.Call)
    return error.code(), error.details() or ""


def sizes_priced(advice: pb.Advice) -> set[int]:
    return {o.size for o in advice.options if o.priced}


def as_text(advice: pb.Advice) -> str:
    return str(advice)


def test_each_user_is_answered_from_their_own_jobs(site: tuple[Daemon, Path]) -> None:
    _, work = site
    sock = work / "advice.sock"
    assert stat.S_IMODE(sock.stat().st_mode) == 0o666
    with channel_as(ROOT, sock) as channel:
        mine = advise(channel, ask())
    assert mine.user_name == "root" and mine.evidence == "1 run at 1 CPU, 1 at 2 CPUs"
    assert sizes_priced(mine) == {1, 2}
    assert mine.options[mine.cheapest].size == 2  # 2 x 8 CPU-minutes beat 1 x 20
    with channel_as(NOBODY.pw_uid, sock) as channel:
        theirs = advise(channel, ask())
    assert theirs.user_name == "nobody" and theirs.evidence == "1 run at 4 CPUs, 1 at 8 CPUs"
    assert sizes_priced(theirs) == {4, 8}
    assert "root" not in as_text(theirs) and "nobody" not in as_text(mine)


def test_a_forged_user_in_the_request_changes_nothing(site: tuple[Daemon, Path]) -> None:
    _, work = site
    forged = ask(user_name="root", user_id=ROOT)
    with channel_as(NOBODY.pw_uid, work / "advice.sock") as channel:
        advice = advise(channel, forged)
        # Root's job name: no evidence, for nobody never ran it; nothing of root's shows.
        other = advise(channel, ask("root-only", user_name="root", user_id=ROOT))
    assert advice.user_name == "nobody" and advice.evidence == "1 run at 4 CPUs, 1 at 8 CPUs"
    assert other.user_name == "nobody" and other.evidence == "no evidence"
    assert not sizes_priced(other) and not other.HasField("cheapest") and not other.pareto
    assert "no completed run of 'root-only' by nobody: no evidence for any option" in other.notes
    for text in (as_text(advice), as_text(other)):
        assert "root" not in text.replace("root-only", "")  # the name it asked about


def test_another_users_job_names_never_appear(site: tuple[Daemon, Path]) -> None:
    _, work = site
    with channel_as(ROOT, work / "advice.sock") as channel:
        answers = [advise(channel, ask(name)) for name in ("sim", "root-only", "nobody-only")]
    assert [a.evidence for a in answers] == ["1 run at 1 CPU, 1 at 2 CPUs", "1 run at 1 CPU", "no evidence"]
    for advice in answers:
        assert "nobody" not in as_text(advice).replace("nobody-only", "")  # the name it asked about


def test_the_advice_socket_serves_advice_only_and_the_submission_socket_no_advice(
    site: tuple[Daemon, Path],
) -> None:
    _, work = site
    with channel_as(NOBODY.pw_uid, work / "advice.sock") as channel, pytest.raises(grpc.RpcError) as predict:
        pb_grpc.PredictorStub(channel).Predict(pb.SubmitRequest(user_name="root"), timeout=10)
    assert isinstance(predict.value, grpc.Call) and predict.value.code() is grpc.StatusCode.UNIMPLEMENTED
    with grpc.insecure_channel(f"unix:{work / 'harp.sock'}") as channel:
        assert refusal(ask(), channel)[0] is grpc.StatusCode.UNIMPLEMENTED
    # The submission socket stays SlurmUser's: nobody cannot even connect.
    with pytest.raises(OSError, match="PermissionError"):
        connect_as(NOBODY.pw_uid, work / "harp.sock")


def test_the_relay_is_the_only_way_in(site: tuple[Daemon, Path]) -> None:
    _, work = site
    inner = relay_dir(work) / "grpc.sock"
    assert stat.S_IMODE(inner.parent.stat().st_mode) == 0o700
    with pytest.raises(OSError, match="PermissionError"):  # nobody cannot reach the gRPC server behind
        connect_as(NOBODY.pw_uid, inner)
    # Root can, but a call that did not come through the relay has no credentials: refused.
    with grpc.insecure_channel(f"unix:{inner}") as channel:
        assert refusal(ask(), channel)[0] is grpc.StatusCode.UNAUTHENTICATED


def test_a_uid_without_a_name_is_refused(site: tuple[Daemon, Path]) -> None:
    _, work = site
    with channel_as(NO_SUCH_UID, work / "advice.sock") as channel:
        code, message = refusal(ask(), channel)
    assert code is grpc.StatusCode.PERMISSION_DENIED and "uid 54321 has no user name" in message


def test_one_user_cannot_take_every_connection(served: tuple[PeerRelay, Path]) -> None:
    relay, work = served
    assert relay.per_user == 2  # a quarter of max_connections = 8
    held = [connect_as(NOBODY.pw_uid, work / "advice.sock") for _ in range(2)]
    try:
        deadline = time.monotonic() + 5
        while relay.open_connections < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        extra = connect_as(NOBODY.pw_uid, work / "advice.sock")
        extra.settimeout(5)
        assert extra.recv(1) == b""  # closed at once
        extra.close()
        with channel_as(ROOT, work / "advice.sock") as channel:  # others are still served
            assert advise(channel, ask()).user_name == "root"
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 5
    while relay.open_connections:  # closed connections are forgotten
        assert time.monotonic() < deadline
        time.sleep(0.01)


COLLUDERS = range(NO_SUCH_UID, NO_SUCH_UID + 8)  # uids the daemon sees as they connect


def hold(uid: int, sock: Path) -> PeerConn:
    """A connection of ``uid``'s that the relay let through (the gRPC server's SETTINGS came)."""
    held = PeerConn(connect_as(uid, sock), uid)
    try:
        held.read_frame()
    except EOFError:
        raise AssertionError(f"uid {uid} refused") from None
    time.sleep(0.02)  # each held a little longer idle than the next
    return held


def touch(held: PeerConn) -> None:
    """Bytes both ways across the connection (an HTTP/2 client's opening, the server's
    acknowledgement): no longer the longest idle."""
    held.send(PREFACE + frame(SETTINGS, 0, 0))
    held.wait_for(SETTINGS, ACK)


def ended(held: PeerConn, within: float = 5.0) -> bool:
    """Whether the relay closed ``held`` (its end read within ``within`` s)."""
    held.conn.settimeout(within)
    try:
        while held.conn.recv(65536):
            pass
    except TimeoutError:
        return False
    return True


@pytest.mark.parametrize(("uids", "each"), [(4, 2), (8, 1)], ids=["4 uids at their cap", "8 uids, 1 each"])
def test_colluding_users_cannot_keep_another_out(
    served: tuple[PeerRelay, Path], uids: int, each: int
) -> None:
    # The relay's 8 slots, 2 per uid: four uids at their cap held all 8, and no other user was
    # served. Now a uid holding none takes the longest-idle connection of a uid holding the most.
    _, work = served
    sock = work / "advice.sock"
    held = [hold(uid, sock) for uid in COLLUDERS[:uids] for _ in range(each)]
    try:
        for other in held[1:]:
            touch(other)
        with channel_as(ROOT, sock) as channel:
            assert advise(channel, ask()).user_name == "root"
            assert ended(held[0])  # the longest idle
            assert not any(ended(other, within=0.2) for other in held[1:])
            with channel_as(NOBODY.pw_uid, sock) as theirs:  # another newcomer: another colluder's goes
                assert advise(theirs, ask()).user_name == "nobody"
            assert sum(ended(other, within=0.5) for other in held[1:]) == 1
            assert advise(channel, ask()).user_name == "root"  # root's own was not taken
    finally:
        for other in held:
            other.conn.close()


def test_a_users_only_connection_goes_only_when_every_slot_is_another_users(
    served: tuple[PeerRelay, Path],
) -> None:
    # Nobody's connection, the oldest and idle longest; three colluders at their cap of 2 and a
    # fourth with 1 fill the 8 slots. The fourth's second connection takes a connection of a uid
    # holding 2, never nobody's only one; and a uid at its cap is refused, not served.
    relay, work = served
    sock = work / "advice.sock"
    opened: list[PeerConn] = []
    try:
        for uid in [NOBODY.pw_uid, *[c for c in COLLUDERS[:3] for _ in range(2)], COLLUDERS[3]]:
            opened.append(hold(uid, sock))
        users, colluders = opened[0], opened[1:]
        for other in colluders[1:]:
            touch(other)
        opened.append(hold(COLLUDERS[3], sock))
        assert ended(colluders[0]) and not ended(users, within=0.2)
        assert not any(ended(other, within=0.2) for other in opened[2:])
        opened.append(PeerConn(connect_as(COLLUDERS[1], sock), 0))
        assert ended(opened[-1])  # at its cap: refused
        assert relay.open_connections == 8
    finally:
        for held in opened:
            held.conn.close()


def test_one_users_unfinished_calls_do_not_starve_the_others(site: tuple[Daemon, Path]) -> None:
    # grpcio gives a call a pool thread when its headers arrive, and the thread waits for the
    # request. Two advice threads: nobody's calls sent without a request held both, and root's call
    # waited out its deadline. Here on both connections nobody may open, 50 calls each, from a raw
    # HTTP/2 client that never acknowledges the server's SETTINGS (its stream limit).
    _, work = site
    block = (
        b"\x83\x86"  # :method POST, :scheme http
        + lit(":path", "/harp.v1.Advisor/Advise") + lit(":authority", "x")
        + lit("content-type", "application/grpc") + lit("te", "trailers")
    )  # fmt: skip
    with channel_as(ROOT, work / "advice.sock") as channel:  # before: a fork among busy threads
        assert advise(channel, ask()).user_name == "root"
        held = [connect_as(NOBODY.pw_uid, work / "advice.sock") for _ in range(2)]
        try:
            for sock in held:
                sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
                sock.sendall(b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, block) for i in range(50)))
            time.sleep(0.5)
            started = time.monotonic()
            assert pb_grpc.AdvisorStub(channel).Advise(ask(), timeout=5).user_name == "root"
            assert time.monotonic() - started < 2
        finally:
            for sock in held:
                sock.close()


def test_a_removed_advice_socket_is_bound_again_and_stop_cleans_up(site: tuple[Daemon, Path]) -> None:
    daemon, work = site
    sock = work / "advice.sock"
    private = relay_dir(work)
    sock.unlink()
    daemon.check_socket()  # the advice process's own check, asked for: it answers nothing
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert time.monotonic() < deadline, "the advice socket was not bound again"
        time.sleep(0.02)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o666
    with channel_as(NOBODY.pw_uid, sock) as channel:
        assert advise(channel, ask()).user_name == "nobody"
    daemon.stop(0)
    assert not sock.exists() and not private.exists()


def test_bad_requests_are_invalid_arguments(site: tuple[Daemon, Path]) -> None:
    _, work = site
    bad = pb.AdviceRequest(job=pb.SubmitRequest(job_name="sim"), deadline_minutes=-1)
    with channel_as(ROOT, work / "advice.sock") as channel:
        code, message = refusal(bad, channel)
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert "deadline must be a finite number > 0" in message
        assert refusal(b"\xff\xff\xff", channel)[0] is grpc.StatusCode.INVALID_ARGUMENT
        # An option's GPUs, 2**31 per node on 2 nodes, past the answer's uint32: before, the
        # conversion failed outside the handler's checks, an UNKNOWN status and a traceback logged.
        # (A partition of unknown size, taken on trust while scontrol cannot be read, holds it.)
        (work / "bin" / "scontrol").write_text("#!/bin/sh\nexit 1\n")
        huge = pb.AdviceRequest(
            job=pb.SubmitRequest(job_name="sim", gpus_per_node=2**31, min_nodes=2), partitions=["nope"]
        )
        code, message = refusal(huge, channel)
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert "past what an answer holds (Value out of range: 4294967296)" in message


def test_a_socket_with_another_owner_at_the_path_is_not_taken(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "advice.sock"))
    listener.listen(1)
    settings = parse(
        {
            "server": {"socket": str(tmp_path / "harp.sock")},
            "store": {"path": str(tmp_path / "store")},
            "advice": {"socket": str(tmp_path / "advice.sock")},
        }
    )
    daemon = Daemon(settings, CollectorRegistry())
    try:
        with pytest.raises(RuntimeError, match="another daemon is serving"):
            daemon.start()
    finally:
        daemon.stop(0)
        listener.close()


def test_a_path_taken_over_is_left_alone(
    served: tuple[PeerRelay, Path], caplog: pytest.LogCaptureFixture
) -> None:
    relay, work = served
    sock = work / "advice.sock"
    sock.unlink()
    sock.write_text("someone else's")
    for _ in range(3):
        relay.check_socket()
    assert sock.read_text() == "someone else's"
    taken = [r for r in caplog.records if "is no longer the advice socket" in r.getMessage()]
    assert len(taken) == 1  # said once, not every few seconds
    relay.stop()
    assert sock.read_text() == "someone else's"


def test_a_request_over_256_kib_is_refused_unread(site: tuple[Daemon, Path]) -> None:
    """docs/advice.md: "A request is at most 256 KiB"."""
    _, work = site
    with channel_as(ROOT, work / "advice.sock") as channel:
        code, _ = refusal(ask(work_dir="w" * (256 * 1024 + 1)), channel)
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        answered = advise(channel, ask(work_dir="w" * (255 * 1024)))  # within: read, and answered
        assert answered.user_name == "root"


def test_the_daemon_warns_when_users_cannot_reach_the_advice_socket(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/advice.md: "The daemon logs a warning at start when users cannot reach the socket" (a
    directory above it that others may not search), and only then."""
    caplog.set_level(logging.INFO, logger="slurm_harp.server.advice_socket")

    def start_and_stop(sock: Path) -> list[str]:
        """What the advice process logs as it starts to serve on ``sock``."""
        settings = parse({"store": {"path": str(tmp_path / "store")}, "advice": {"socket": str(sock)}})
        caplog.clear()
        server, relay = serve_advice(sock, lambda: settings)
        relay.stop()
        server.stop(0).wait()
        return [r.getMessage() for r in caplog.records]

    # Short directories of their own: the relay's socket beside the advice socket must fit in 107
    # bytes, which pytest's tmp_path under a pytest-xdist worker's directory leaves no room for.
    reachable, closed = (Path(tempfile.mkdtemp(prefix="harp-advice-")) for _ in range(2))
    try:
        reachable.chmod(0o755)
        said = start_and_stop(reachable / "advice.sock")
        assert any("advice for users on unix:" in m for m in said)
        assert not [m for m in said if "users cannot reach" in m]
        closed.chmod(0o700)
        sock = closed / "run" / "advice.sock"
        said = start_and_stop(sock)
        assert f"users cannot reach {sock}: {closed} is not searchable by others (o+x)" in said
    finally:
        shutil.rmtree(reachable, ignore_errors=True)
        shutil.rmtree(closed, ignore_errors=True)


def test_an_idle_connection_is_closed_after_5_minutes(served: tuple[PeerRelay, Path]) -> None:
    """docs/advice.md: "an idle connection is closed after 5 minutes". The daemon's relay has that
    timer; shortened, a connection that sends nothing is closed by it and no longer counted."""
    relay, work = served
    assert relay.idle_seconds == 5 * 60
    relay.idle_seconds = 0.5  # the same timer, for connections accepted from now on
    conn = connect_as(NOBODY.pw_uid, work / "advice.sock")
    try:
        conn.settimeout(10)
        opened = time.monotonic()
        while conn.recv(65536):  # the gRPC server's settings, perhaps; then the end
            pass
        assert 0.4 < time.monotonic() - opened < 5
    finally:
        conn.close()
    deadline = time.monotonic() + 5
    while relay.open_connections:
        assert time.monotonic() < deadline, "the idle connection is still counted"
        time.sleep(0.05)
