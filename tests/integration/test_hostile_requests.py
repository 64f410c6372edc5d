"""Requests a hostile or broken client can send: answered with a no-op Decision, never an RPC error
(which would trip the plugin's circuit breaker for everyone), and without leaking memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.text import MAX_TEXT_BYTES
from tests.e2e.daemon_process import DaemonProcess
from tests.integration.harp_client import Client

METHOD = "/harp.v1.Predictor/Predict"


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2), as any client could write it."""
    assert len(payload) < 2**14
    length = (
        bytes([len(payload)])
        if len(payload) < 128
        else bytes([len(payload) & 0x7F | 0x80, len(payload) >> 7])
    )
    return bytes([number << 3 | 2]) + length + payload


class Raw:
    """Sends bytes as they are, so that the daemon, not the client library, parses them."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix:{socket}")
        self.call = self.channel.unary_unary(METHOD, None, None)  # identity (de)serializers

    def predict(self, body: bytes) -> pb.Decision:
        return pb.Decision.FromString(self.call(body, timeout=5))

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def daemon(trained_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    work = tmp_path_factory.mktemp("hostile")
    process = DaemonProcess(work, trained_store, mode="rewrite")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def raw(daemon: DaemonProcess) -> Iterator[Raw]:
    client = Raw(daemon.socket)
    yield client
    client.close()


BAD = {
    "job name not UTF-8": field(6, b"\xff\xfejob"),
    "work dir not UTF-8": field(7, b"/home/\xe9t\xe9"),
    "name cut inside a character": field(6, "é".encode() * 127 + b"\xc3"),
    "a surrogate": field(1, b"\xed\xa0\x80"),
    "garbage": b"\xff\xff\xff\xff\xff",
    "truncated field": field(6, b"abcdef")[:4],
    "wrong wire type": bytes([6 << 3 | 0]) + b"\xff" * 11,
}


@pytest.mark.parametrize("body", BAD.values(), ids=BAD.keys())
def test_a_request_that_does_not_parse_is_a_bad_request_not_an_error(raw: Raw, body: bytes) -> None:
    decision = raw.predict(body)
    assert decision.mode == "off" and decision.annotation == "" and decision.user_message == ""
    assert len(decision.targets) == 3
    assert all(t.action == pb.ACTION_NONE and t.reason == pb.REASON_BAD_REQUEST for t in decision.targets)


def test_huge_and_odd_but_valid_fields_are_served(daemon: DaemonProcess) -> None:
    with Client(daemon.socket) as client:
        reply = client.predict(job_name="x" * 1_000_000, work_dir="\x00\n\t", user_name="ü" * 5000,
                               time_limit_minutes=2**64 - 1, submit_time=-(2**63))  # fmt: skip
        assert all(t.reason != pb.REASON_BAD_REQUEST for t in reply.targets)
        # After every bad request, a good one is still answered as usual.
        ok = client.predict(user_name="u5", time_limit_minutes=60, min_cpus=1)
        assert any(t.HasField("predicted") for t in ok.targets)


def test_an_absurd_gpu_count_is_unknown_not_a_model_error(daemon: DaemonProcess) -> None:
    """A 400-digit count overflowed float() inside the features: the model was blamed (model_error)."""
    with Client(daemon.socket) as client:
        reply = client.predict(user_name="u5", time_limit_minutes=600, tres_per_node="gres/gpu:" + "9" * 400)
    assert pb.REASON_MODEL_ERROR not in {t.reason for t in reply.targets}
    assert any(t.HasField("predicted") for t in reply.targets)
    log = daemon.log.read_text()
    assert "tres_per_node: GPU count out of range (0 to 4294967295); read as unknown" in log
    assert "OverflowError" not in log


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=2048))
def test_any_bytes_get_a_decision(raw: Raw, body: bytes) -> None:
    decision = raw.predict(body)  # never a grpc.RpcError
    try:
        request = pb.SubmitRequest.FromString(body)
    except Exception:
        assert {t.reason for t in decision.targets} == {pb.REASON_BAD_REQUEST}
    else:
        assert (pb.REASON_BAD_REQUEST in {t.reason for t in decision.targets}) == partitions_cut(request)


def partitions_cut(request: pb.SubmitRequest) -> bool:
    """Whether the request's partition list is longer than a request carries (255 bytes)."""
    return len(request.partition.encode()) > MAX_TEXT_BYTES


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_bad_requests_do_not_leak(daemon: DaemonProcess, raw: Raw) -> None:
    """grpcio's deserialisation-failure path leaked ~19 KB a call (grpc/grpc#36908): 10,000 calls
    would add ~190 MB. The daemon parses the bytes itself; its memory stays flat.
    benchmarks/bench_bad_requests.py measures 100,000 calls against good ones."""
    assert daemon.proc is not None
    body = BAD["job name not UTF-8"]
    for _ in range(2000):  # warm-up: thread pools, allocator arenas
        raw.predict(body)
    before = rss_mb(daemon.proc.pid)
    for _ in range(10_000):
        raw.predict(body)
    grown = rss_mb(daemon.proc.pid) - before
    assert grown < 20, f"RSS grew {grown:.1f} MB over 10,000 bad requests"


ANY_TEXT = st.one_of(st.text(max_size=64), st.text(min_size=300, max_size=5000))
ANY_U64 = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 4294967294, 4294967295, 65534, 2**63]))
ANY_U32 = st.integers(0, 2**32 - 1)
REQUEST = st.builds(
    pb.SubmitRequest,
    user_name=ANY_TEXT, user_id=ANY_U32, account=ANY_TEXT, partition=ANY_TEXT, qos=ANY_TEXT,
    job_name=ANY_TEXT, work_dir=ANY_TEXT, script_signature=ANY_TEXT, time_limit_minutes=ANY_U64,
    time_min_minutes=ANY_U64, mem_per_node_mb=ANY_U64, mem_per_cpu_mb=ANY_U64, min_cpus=ANY_U32,
    cpus_per_task=ANY_U32, num_tasks=ANY_U32, min_nodes=ANY_U32, gpus_per_node=ANY_U32,
    tres_per_node=ANY_TEXT, is_array=st.booleans(), submit_time=st.integers(-(2**63), 2**63 - 1),
)  # fmt: skip


def asked(request: pb.SubmitRequest, target: int) -> float | None:
    """What the user asked for ``target`` in the decision's unit (memory: MB per node)."""
    if target == pb.TARGET_TIME:
        return request.time_limit_minutes if request.HasField("time_limit_minutes") else None
    if target == pb.TARGET_CPUS:
        return request.min_cpus if request.HasField("min_cpus") else None
    if request.HasField("mem_per_node_mb"):
        return request.mem_per_node_mb
    if request.HasField("mem_per_cpu_mb") and request.HasField("min_cpus"):
        return request.mem_per_cpu_mb * request.min_cpus / max(request.min_nodes, 1)
    return None


def rewrites_within_the_request(raw: Raw, request: pb.SubmitRequest) -> int:
    """Asks for a decision on ``request``, checks that no rewrite is above what it asked or not
    positive, and returns how many targets were rewritten."""
    decision = raw.predict(request.SerializeToString())  # never a grpc.RpcError
    if partitions_cut(request):  # its per-partition rules cannot be applied: no action
        assert {t.reason for t in decision.targets} == {pb.REASON_BAD_REQUEST}
        return 0
    assert pb.REASON_BAD_REQUEST not in {t.reason for t in decision.targets}
    rewrites = 0
    for t in decision.targets:
        if t.action == pb.ACTION_REWRITE:
            limit = asked(request, t.target)
            assert limit is not None and 0 < t.new_value <= limit, (t, limit)
            rewrites += 1
    return rewrites


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=REQUEST)
def test_adversarial_requests_are_served_and_never_raise_a_limit(raw: Raw, request: pb.SubmitRequest) -> None:
    rewrites_within_the_request(raw, request)


# A request the daemon lowers (test_daemon.py's), then the same with the extremes a client can send.
REWRITTEN = pb.SubmitRequest(user_name="u5", time_limit_minutes=24 * 60, min_cpus=32, submit_time=850000000)
# Values from Slurm's sentinels on (NO_VAL, 2^63 MB) are "not given" (server.convert): the extremes
# are the largest values that are counts.
EXTREMES: list[dict[str, int]] = [
    {},
    {"time_limit_minutes": 2**32 - 3},
    {"time_limit_minutes": 2**32 - 3, "time_min_minutes": 2**32 - 3},
    {"min_cpus": 2**32 - 3, "cpus_per_task": 2**16 - 3, "num_tasks": 2**32 - 3},
    {"mem_per_cpu_mb": 2**63 - 1, "min_nodes": 2**32 - 3},
    {"mem_per_node_mb": 2**63 - 1, "gpus_per_node": 2**32 - 3},
    {"submit_time": -(2**63)},
]


def test_the_never_raise_property_is_checked_on_rewritten_requests(raw: Raw) -> None:
    """The property above holds for rewrites only: these requests are rewritten (a fixed model and
    requests, so no run can pass without a rewrite checked)."""
    counts = []
    for extreme in EXTREMES:
        request = pb.SubmitRequest()
        request.CopyFrom(REWRITTEN)
        for name, value in extreme.items():
            setattr(request, name, value)
        counts.append(rewrites_within_the_request(raw, request))
    assert all(counts), counts
