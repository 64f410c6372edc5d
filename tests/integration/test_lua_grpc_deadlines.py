"""The plugin's Lua gRPC client keeps to a call's deadline, and a timed-out call costs no more.

Against a slow grpcio handler (the timed-out connection is dropped, the next call works), a scripted
HTTP/2 peer that reads the request and never answers, one that answers in pieces (the rest of a
frame waited for within the deadline), a listener that never accepts, and peers that never stop
sending frames the client may not refuse (unknown types, PINGs, empty DATA, header blocks of a
stream that is over...): each call ends at its deadline whatever the peer sends, or the wall clock
does (set back in the client by an LD_PRELOAD shim, tests/integration/wall_step.c).
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.integration.conformance_service import call
from tests.integration.h2_peer import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    OK_HEADERS,
    OK_TRAILERS,
    PING,
    PRIORITY,
    SETTINGS,
    WINDOW_UPDATE,
    PeerConn,
    frame,
)
from tests.integration.lua_driver import SLACK_MS, Driver, lua_or_skip

lua_or_skip()  # skips this module where lua5.1 or the driver's Lua libraries are missing


def test_deadline_exceeded_against_a_slow_handler(server: grpc.Server, driver: Driver) -> None:
    out = call(driver, "Sleep", "0.3", deadline_ms=50)
    # The client's timer, or grpcio's own for the grpc-timeout it was sent: under load either may
    # end the call first, both at the deadline.
    assert not out["ok"] and out["err"] in ("deadline exceeded", "grpc-status 4: Deadline Exceeded"), out
    assert out["ms"] >= 45 and out["late_ms"] < SLACK_MS, out
    assert out["connected"] is False, "a timed-out connection is dropped"
    assert call(driver, "Echo", "x")["ok"]


def test_silent_server_costs_the_deadline_and_no_more(peer_at: Any, driver: Driver) -> None:
    def script(pc: PeerConn) -> None:
        pc.start()
        pc.read_request()
        time.sleep(1)

    peer_at(script)
    out = call(driver, "Echo", "x", deadline_ms=50)
    assert out["err"] == "deadline exceeded", out
    assert out["ms"] >= 45 and out["late_ms"] < SLACK_MS, out


def test_listener_that_never_accepts_costs_the_deadline(tmp_path: Path) -> None:
    path = tmp_path / "backlog.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)  # connect succeeds (backlog); nobody ever reads or answers
    drv = Driver(path)
    try:
        out = call(drv, "/conf.Test/Echo", "x", deadline_ms=50)
        assert out["err"] == "deadline exceeded" and out["late_ms"] < SLACK_MS, out
    finally:
        drv.close()
        listener.close()


def answer_in_pieces(cut: list[int], pause: float) -> Any:
    """A peer answering each call with the usual three frames, sent in pieces cut at the byte
    offsets ``cut`` (mid-frame: the client has part of a frame and must wait for the rest)."""

    def script(pc: PeerConn) -> None:
        pc.start()
        while True:
            sid, _, body = pc.read_request()
            whole = (
                frame(HEADERS, END_HEADERS, sid, OK_HEADERS)
                + frame(DATA, 0, sid, body)  # the request's gRPC message, echoed
                + frame(HEADERS, END_HEADERS | END_STREAM, sid, OK_TRAILERS)
            )
            edges = [0, *cut, len(whole)]
            for start, end in itertools.pairwise(edges):
                pc.send(whole[start:end])
                time.sleep(pause)

    return script


def test_an_answer_arriving_in_pieces_is_read_whole(peer_at: Any, driver: Driver) -> None:
    # Cut inside the first frame's header, inside the DATA frame's header and inside its payload.
    peer_at(answer_in_pieces([4, 9 + len(OK_HEADERS) + 5, 9 + len(OK_HEADERS) + 9 + 3], 0.01))
    out = call(driver, "Echo", "pieces")
    assert out["ok"] and bytes.fromhex(out["head"]) == b"pieces", out
    assert call(driver, "Echo", "again")["ok"], "the connection is kept"


def test_the_rest_of_an_answer_that_never_comes_costs_the_deadline(peer_at: Any, driver: Driver) -> None:
    # Part of the DATA frame arrives at once; the rest comes far past the deadline.
    peer_at(answer_in_pieces([9 + len(OK_HEADERS) + 9 + 3], 1.0))
    out = call(driver, "Echo", "x", deadline_ms=50)
    assert out["err"] == "deadline exceeded", out
    assert out["ms"] >= 45 and out["late_ms"] < SLACK_MS, out


def wall_step_shim(tmp_path: Path) -> Path:
    """tests/integration/wall_step.c built: gettimeofday set back once a file appears."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the LD_PRELOAD shim that steps the wall clock")
    shim = tmp_path / "wall_step.so"
    source = Path(__file__).with_name("wall_step.c")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"], check=True)
    return shim


def test_a_wall_clock_stepped_back_costs_the_deadline_and_no_more(
    tmp_path: Path, sock: Path, peer_at: Any
) -> None:
    # luasocket times its waits on gettimeofday, from the start of each receive: with the wall clock
    # set back 8 s while a reply was partly in, the next byte made the receive wait 8 s more.
    # The client's waits are poll(2)s of the time left on its monotonic clock.
    step = tmp_path / "step"
    shim = wall_step_shim(tmp_path)

    def script(pc: PeerConn) -> None:
        pc.start()
        sid, _, body = pc.read_request()
        pc.send(frame(HEADERS, END_HEADERS, sid, OK_HEADERS))
        time.sleep(0.05)  # the client is waiting for the next frame
        step.touch()  # gettimeofday in the client: 8 s back
        time.sleep(0.05)
        pc.send(frame(DATA, 0, sid, body)[:4])  # part of the next frame's header, never the rest
        while True:
            pc.read_frame()

    peer_at(script)
    env = {"LD_PRELOAD": str(shim), "HARP_WALL_STEP_FILE": str(step), "HARP_WALL_STEP_S": "8"}
    drv = Driver(sock, env=env)
    try:
        out = call(drv, "Echo", "x", deadline_ms=200)
    finally:
        drv.close()
    assert step.exists(), "the wall clock was stepped during the call"
    assert out["err"] == "deadline exceeded", out
    assert out["ms"] >= 195 and out["late_ms"] < SLACK_MS, out


# --- floods: a peer that never stops sending -----------------------------------------------------------

# name: (HEADERS of an OK response first, the client's frames read, the frames sent over and over once
# the request is read (sid: its stream)). A header block of stream 1 is decoded each time (stream 1 is
# over: the flood follows a first call answered normally, on the same connection).
BIG_BLOCK = b"\x82" * 4096  # :method GET, 4,096 times: the longest header block the client decodes
FLOODS: dict[str, tuple[bool, bool, Callable[[int], bytes]]] = {
    "unknown frame types": (False, True, lambda sid: frame(0xFA, 0, 0)),
    "unknown frames of 16 KiB": (False, True, lambda sid: frame(0xFA, 0, 0, b"x" * 16384)),
    "PING ACKs": (False, True, lambda sid: frame(PING, ACK, 0, b"12345678")),
    "PINGs (each owed an ACK)": (False, True, lambda sid: frame(PING, 0, 0, b"12345678")),
    "PINGs whose ACKs are never read": (False, False, lambda sid: frame(PING, 0, 0, b"12345678")),
    "SETTINGS (each owed an ACK)": (False, True, lambda sid: frame(SETTINGS, 0, 0)),
    "PRIORITY": (False, True, lambda sid: frame(PRIORITY, 0, sid, b"\0\0\0\0\x10")),
    "WINDOW_UPDATE of 1": (False, True, lambda sid: frame(WINDOW_UPDATE, 0, sid, b"\0\0\0\1")),
    "empty DATA": (True, True, lambda sid: frame(DATA, 0, sid)),
    "header blocks of a stream that is over": (
        False,
        True,
        lambda sid: (
            frame(HEADERS, 0, 1, BIG_BLOCK[:4000]) + frame(CONTINUATION, END_HEADERS, 1, BIG_BLOCK[4000:])
        ),
    ),
}


def flood(
    headers_first: bool, drain: bool, unit: Callable[[int], bytes], seconds: float = 3.0
) -> Callable[[PeerConn], None]:
    """Answer the first call, then flood the second: `unit` over and over (in 256 KB writes) for at most
    `seconds` or until the client hangs up, reading what the client sends meanwhile (ACKs) if `drain`."""

    def script(pc: PeerConn) -> None:
        pc.start()
        sid, _, _ = pc.read_request()
        pc.respond(sid)
        sid, _, _ = pc.read_request()
        if drain:
            threading.Thread(target=read_all, args=(pc.conn,), daemon=True).start()
        if headers_first:
            pc.send(frame(HEADERS, END_HEADERS, sid, OK_HEADERS))
        one = unit(sid)
        blob = one * max(1, 262144 // len(one))
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            pc.send(blob)

    return script


def read_all(conn: socket.socket) -> None:
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass


@pytest.mark.parametrize("name", list(FLOODS))
def test_a_flood_of_frames_costs_the_deadline_and_no_more(peer_at: Any, driver: Driver, name: str) -> None:
    peer_at(flood(*FLOODS[name]))
    assert call(driver, "Echo", "x")["ok"]
    out = call(driver, "Echo", "x", deadline_ms=50)
    assert not out["ok"] and out["err"] == "deadline exceeded", out
    assert out["ms"] >= 45 and out["late_ms"] < SLACK_MS, out
    assert out["connected"] is False, "the flooded connection is dropped"
