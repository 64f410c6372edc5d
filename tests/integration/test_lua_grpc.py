"""The Lua plugin's gRPC client (harp.h2 over a Unix socket) against a real grpcio server."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.api import predictor_pb2_grpc as pb_grpc
from tests.conftest import REPO
from tests.integration.lua_driver import (
    DEADLINE_MS,
    JOB_DESC,
    PLUGIN_ROOMY_MS,
    ROOMY_MS,
    SLACK_MS,
    Driver,
    lua_or_skip,
    serving_threads,
)

pytestmark = pytest.mark.alone  # times itself against the wall clock (scripts/test)

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing

DECISION = pb.Decision(
    targets=[
        pb.TargetDecision(
            target=pb.TARGET_TIME,
            action=pb.ACTION_REWRITE,
            predicted=42.5,
            quantile=0.9,
            new_value=60,
            reason=pb.REASON_UNSPECIFIED,
            model_version="time@test",
            detail="q0.9 of 42.5 min",
        ),
        pb.TargetDecision(
            target=pb.TARGET_MEMORY,
            action=pb.ACTION_ANNOTATE,
            predicted=1234.0,
            reason=pb.REASON_SHADOW,
            model_version="mem@test",
        ),
    ],
    user_message="harp: lowered time from 02:00:00 to 01:00:00.",
    annotation="harp:rewrite,t!=60/q0.9,m=1234,v=mem@test+time@test",
    mode="rewrite",
)


class Servicer(pb_grpc.PredictorServicer):
    """Answers DECISION; the job name selects misbehaviour ("sleep", "abort")."""

    def __init__(self) -> None:
        self.requests: list[pb.SubmitRequest] = []

    def Predict(self, request: pb.SubmitRequest, context: grpc.ServicerContext) -> pb.Decision:
        self.requests.append(request)
        if request.job_name == "sleep":
            time.sleep(0.3)
        if request.job_name == "abort":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no model loaded")
        return DECISION


def start_server(sock: Path, servicer: Servicer) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_PredictorServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    return server


def start_garbage_server(sock: Path, reply: bytes) -> grpc.Server:
    """Same method name, but the response bytes are sent as they are (not a valid Decision)."""
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: reply)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("harp.v1.Predictor", {"Predict": handler}),)
    )
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    return server


@pytest.fixture
def servicer() -> Servicer:
    return Servicer()


@pytest.fixture
def server(sock: Path, servicer: Servicer) -> Iterator[grpc.Server]:
    srv = start_server(sock, servicer)
    yield srv
    srv.stop(0).wait()


def test_round_trip_decodes_the_decision_and_sends_the_job(
    server: grpc.Server, servicer: Servicer, driver: Driver
) -> None:
    out = driver.call(submit_uid=1000)
    assert out["ok"], out
    d = out["decision"]
    assert d["mode"] == DECISION.mode
    assert d["user_message"] == DECISION.user_message
    assert d["annotation"] == DECISION.annotation
    assert len(d["targets"]) == 2
    for got, want in zip(d["targets"], DECISION.targets, strict=True):
        assert (got["target"], got["action"], got["reason"]) == (want.target, want.action, want.reason)
        assert (got["model_version"], got["detail"]) == (want.model_version, want.detail)
        for name in ("predicted", "quantile", "new_value"):
            value = float(got[name]) if name in got else None
            assert value == (getattr(want, name) if want.HasField(name) else None), name

    (req,) = servicer.requests
    assert req.user_name == "alice" and req.user_id == 1000 and req.job_name == "train"
    assert req.partition == "batch" and req.account == "physics" and req.work_dir == "/home/alice"
    assert req.time_limit_minutes == 120 and not req.HasField("time_min_minutes")
    assert req.mem_per_node_mb == 4000 and not req.HasField("mem_per_cpu_mb")
    assert (req.min_cpus, req.cpus_per_task, req.num_tasks, req.min_nodes) == (4, 4, 1, 1)
    assert req.gpus_per_node == 2 and req.tres_per_node == "gres:gpu:a100:2"
    assert req.is_array is False and req.qos == "normal"  # none named, no default: slurmctld's own
    assert not req.HasField("script_signature")  # no model has it (request.lua)
    assert abs(req.submit_time - time.time()) < 60


def test_connection_is_reused(server: grpc.Server, driver: Driver) -> None:
    outs = [driver.call() for _ in range(6)]  # at ROOMY_MS: reuse is checked, not speed
    assert all(out["ok"] for out in outs), outs
    assert outs[-1]["stats"]["connects"] == 1 and outs[-1]["stats"]["retries"] == 0, outs


def test_server_past_the_deadline_is_an_error_within_the_deadline(
    server: grpc.Server, driver: Driver
) -> None:
    slow = driver.call(job_desc={**JOB_DESC, "name": "sleep"}, deadline_ms=DEADLINE_MS)
    assert not slow["ok"]
    # The client's timer, or grpcio's own for the grpc-timeout it was sent ("Deadline Exceeded"):
    # under load either may end the call first.
    assert "deadline" in slow["err"].lower() or "timed out" in slow["err"], slow
    assert slow["late_ms"] < SLACK_MS, slow
    assert slow["ms"] >= DEADLINE_MS * 0.9, slow
    assert slow["connected"] is False, "a timed-out connection is dropped"
    again = driver.call()
    assert again["ok"], again
    assert again["stats"]["retries"] == 0


def test_no_socket_fails_fast(tmp_path: Path) -> None:
    drv = Driver(tmp_path / "missing.sock")
    try:
        out = drv.call()
        assert not out["ok"] and "No such file" in out["err"] and out["stats"]["connects"] == 0, out
        # fails at once: nothing waited for (5 ms), the deadline least of all (5 s, whatever the load)
        assert out["own_ms"] < 5 and out["ms"] < ROOMY_MS / 2, out
    finally:
        drv.close()


def test_socket_without_listener_fails_fast(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # bound, never listening: what a crashed daemon leaves behind
    drv = Driver(path)
    try:
        out = drv.call()
        assert not out["ok"] and "refused" in out["err"].lower() and out["stats"]["connects"] == 0, out
        assert out["own_ms"] < 5 and out["ms"] < ROOMY_MS / 2, out
    finally:
        drv.close()
        stale.close()


@pytest.mark.parametrize(
    "reply",
    [b"\x0a\xff\xff\xff\xff\x0f", b"\xff" * 11, b"\x0b"],
    ids=["truncated-submessage", "overlong-varint", "group-wire-type"],
)
def test_garbage_response_is_an_error(sock: Path, reply: bytes) -> None:
    srv = start_garbage_server(sock, reply)
    drv = Driver(sock)
    try:
        out = drv.call()
        assert not out["ok"] and out["err"], out
        assert drv.call()["err"], "the driver (and the plugin state) survives"
    finally:
        drv.close()
        srv.stop(0).wait()


def test_non_ok_grpc_status_is_an_error(server: grpc.Server, driver: Driver) -> None:
    # an abort before any message arrives as a trailers-only response
    out = driver.call(job_desc={**JOB_DESC, "name": "abort"})
    assert not out["ok"]
    assert "grpc-status 9" in out["err"] and "no model loaded" in out["err"], out
    assert driver.call()["ok"], "the next call works"


def test_reused_connection_after_server_restart_retries_once(sock: Path, servicer: Servicer) -> None:
    srv = start_server(sock, servicer)
    drv = Driver(sock)
    try:
        drv("precheck", on=False)  # go straight to the stale connection: the retry path
        first = drv.call()
        assert first["ok"] and first["stats"]["connects"] == 1
        srv.stop(0).wait()
        srv = start_server(sock, servicer)
        after = drv.call()
        assert after["ok"], after
        assert after["stats"]["retries"] == 1 and after["stats"]["connects"] == 2, after

        drv("precheck", on=True)  # default: a GOAWAY/EOF seen while idle means reconnect, no retry
        srv.stop(0).wait()
        srv = start_server(sock, servicer)
        third = drv.call()
        assert third["ok"], third
        assert third["stats"]["retries"] == 1 and third["stats"]["connects"] == 3, third
    finally:
        drv.close()
        srv.stop(0).wait()


def test_fresh_connection_failure_is_not_retried(sock: Path) -> None:
    srv = start_garbage_server(sock, b"\xff" * 11)
    drv = Driver(sock)
    try:
        out = drv.call()
        assert not out["ok"] and out["stats"]["retries"] == 0, out
    finally:
        drv.close()
        srv.stop(0).wait()


def plugin_driver(tmp_path: Path, sock: Path) -> Driver:
    """The driver with the whole plugin (job_submit.lua and its config) for the "submit" op, at the
    longest deadline the plugin takes: its calls must succeed on a loaded machine too."""
    entry = tmp_path / "job_submit.lua"
    shutil.copy(REPO / "plugin" / "job_submit.lua", entry)
    (tmp_path / "harp_plugin.lua").write_text(
        f'return {{lib_dir = "{REPO / "plugin"}", socket = "{sock}", disable_file = "{tmp_path / "off"}", '
        f"deadline_ms = {PLUGIN_ROOMY_MS}}}\n"
    )
    return Driver(sock, entry)


def test_full_plugin_rewrites_through_real_grpc(tmp_path: Path, sock: Path, server: grpc.Server) -> None:
    drv = plugin_driver(tmp_path, sock)
    try:
        out = drv("submit", job_desc={**JOB_DESC, "admin_comment": "harp:forged site=x"}, submit_uid=1000)
        assert out["rc"] == 0
        jd = out["job_desc"]
        assert jd["time_limit"] == 60, out
        assert jd["min_mem_per_node"] == 4000, "annotate-only target leaves memory alone"
        assert jd["admin_comment"] == "site=x " + DECISION.annotation
        assert out["logs"]["user"] == [DECISION.user_message]
        assert not out["logs"]["error"], out["logs"]

        (tmp_path / "off").touch()
        off = drv("submit", job_desc=JOB_DESC, submit_uid=1000)
        assert off["job_desc"]["time_limit"] == 120, "disabled: untouched"
        os.unlink(tmp_path / "off")

        server.stop(0).wait()
        down = drv("submit", job_desc=JOB_DESC, submit_uid=1000)
        assert down["rc"] == 0 and down["job_desc"]["time_limit"] == 120
        assert down["own_ms"] < DEADLINE_MS + SLACK_MS, down  # the socket is gone: fails at once
        assert any("daemon call failed" in line for line in down["logs"]["error"]), down["logs"]
        skipped = drv("submit", job_desc=JOB_DESC, submit_uid=1000)
        assert skipped["stats"] == down["stats"], "breaker open: the daemon is not even tried"
        assert skipped["rc"] == 0 and skipped["own_ms"] < 5, skipped
    finally:
        drv.close()


def test_p50_of_200_round_trips(server: grpc.Server, driver: Driver) -> None:
    assert driver.call()["ok"]  # warm: connection and module caches
    # peers: the server's waits for a CPU are not the client's either
    out = driver(
        "bench", n=200, deadline_ms=DEADLINE_MS, job_desc=JOB_DESC, peers=serving_threads(), timeout=120
    )
    print(
        f"\nLua gRPC round trip over a Unix socket: p50 {out['p50_ms']:.3f} ms, "
        f"p99 {out['p99_ms']:.3f} ms, max {out['max_ms']:.3f} ms, errors {out['errors']}, "
        f"p50 less waits for a CPU {out['own_p50_ms']:.3f} ms"
    )
    assert out["errors"] == 0, out
    assert out["own_p50_ms"] < 10, out


# --- replies too large to be a Decision: refused, the job unchanged, one line ---------------------------

REWRITE_TARGET = pb.TargetDecision(target=pb.TARGET_TIME, action=pb.ACTION_REWRITE, new_value=60)
TARGET_BYTES = len(pb.Decision(targets=[REWRITE_TARGET]).SerializeToString())


def decision_of(size: int) -> bytes:
    """DECISION (which lowers the time limit to 60) with a `detail` making it `size` bytes long."""
    d = pb.Decision()
    d.CopyFrom(DECISION)
    d.targets[1].detail = "x" * (size - len(DECISION.SerializeToString()))
    while len(out := d.SerializeToString()) > size:  # the lengths' own bytes
        d.targets[1].detail = d.targets[1].detail[: size - len(out)]
    assert len(out) == size
    return out


HOSTILE_REPLIES = {
    # the audit's reply: 1 MiB of targets (174,759: 400 ms to decode and apply in slurmctld's locks)
    "1 MiB of targets": pb.Decision(
        targets=[REWRITE_TARGET] * ((1 << 20) // TARGET_BYTES)
    ).SerializeToString(),
    "16,385 bytes": decision_of(16385),
    "17 targets": pb.Decision(targets=[REWRITE_TARGET] * 17, mode="rewrite").SerializeToString(),
    "8,000 empty targets": b"\x0a\x00" * 8000,  # 16,000 bytes: within the size, not within 16 targets
    # within the size, past harp.pb's bounds on a field (a detail of 16 KiB), or on unknown fields
    "16,384 bytes": decision_of(16384),
    "8,000 unknown fields": DECISION.SerializeToString() + b"\x48\x01" * 8000,
}
# Why each is refused, as the one log line says.
REFUSED = ("response larger than 16384 bytes", "more than 16 targets", "longer than", "unknown or repeated")


@pytest.mark.parametrize("name", list(HOSTILE_REPLIES))
def test_a_reply_too_large_for_a_decision_leaves_the_job_unchanged(
    tmp_path: Path, sock: Path, name: str
) -> None:
    srv = start_garbage_server(sock, HOSTILE_REPLIES[name])
    drv = plugin_driver(tmp_path, sock)
    try:
        out = drv("submit", job_desc=JOB_DESC, submit_uid=1000, peers=serving_threads())
        assert out["rc"] == 0 and out["job_desc"] == JOB_DESC, out["job_desc"]
        own = out["own_ms"]
        assert own < SLACK_MS, f"refused on its size or its 17th target, not decoded whole: {own:.1f} ms"
        logs = out["logs"]
        lines: list[str] = list(logs["error"] or []) + list(logs["info"] or [])  # cjson: [] is {}
        assert len(lines) == 1, lines
        line = lines[0]
        assert "daemon call failed" in line, line
        assert any(why in line for why in REFUSED), line
        assert not out["logs"]["user"], out["logs"]
    finally:
        drv.close()
        srv.stop(0).wait()


def decision_at_the_bounds() -> bytes:
    """DECISION with 16 targets, each string at harp.pb's bound (the annotation at harp.apply's)."""
    d = pb.Decision()
    d.CopyFrom(DECISION)
    d.targets.extend([pb.TargetDecision(target=pb.TARGET_CPUS, reason=pb.REASON_NO_GAIN)] * 14)
    for t in d.targets:
        t.model_version, t.detail = "v" * 64, "d" * 512
    d.user_message = d.user_message.ljust(512, ".")
    d.annotation = d.annotation.ljust(512, "x")
    return d.SerializeToString()


def test_a_decision_at_the_bounds_is_applied(tmp_path: Path, sock: Path) -> None:
    reply = decision_at_the_bounds()
    srv = start_garbage_server(sock, reply)
    drv = plugin_driver(tmp_path, sock)
    try:
        out = drv("submit", job_desc=JOB_DESC, submit_uid=1000)
        sent = pb.Decision.FromString(reply)
        assert out["job_desc"]["time_limit"] == 60 and out["job_desc"]["admin_comment"] == sent.annotation
        assert out["logs"]["user"] == [sent.user_message] and not out["logs"]["error"], out
    finally:
        drv.close()
        srv.stop(0).wait()
