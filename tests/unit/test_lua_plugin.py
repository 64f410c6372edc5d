"""The Lua job_submit plugin: its own Lua test suite, plus protobuf parity with the Python side."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.decision import Action, Decision, TargetDecision
from slurm_harp.core.job import JobRecord
from slurm_harp.core.policy import Mode, Policy
from slurm_harp.core.predictor import Predictor
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.tag import annotation_for, as_submitted, parse_tag
from slurm_harp.evaluation.site_targets import planned_limit
from slurm_harp.server.convert import decision_to_proto, request_from_proto
from slurm_harp.server.service import bad_request
from tests.conftest import REPO, lua51
from tests.unit.test_modes import Guard
from tests.unit.test_predictor import FakeModel, vectorize

LUA_TESTS = REPO / "tests" / "lua"
LUA = lua51()


def _lua(*args: str, stdin: str = "") -> str:
    proc = subprocess.run(
        [LUA, *args], input=stdin, capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )
    assert proc.returncode == 0, f"lua5.1 {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _tool(mode: str, payload: Any) -> Any:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    out = _lua(str(LUA_TESTS / "pb_tool.lua"), mode, stdin=text)
    return out.rstrip("\n") if mode == "signature" else json.loads(out)


def test_lua_suite_passes() -> None:
    out = _lua(str(LUA_TESTS / "run.lua"))
    last = out.strip().splitlines()[-1]
    passed, failed = int(last.split()[0]), int(last.split()[2])
    assert failed == 0, out
    assert passed >= 40, out


# --- SubmitRequest: encoded in Lua, parsed by the real protobuf runtime ---------------------------------

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**53)
TEXT = st.text(max_size=40)

REQUEST_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "user_name": TEXT,
    "user_id": U32,
    "account": TEXT,
    "partition": TEXT,
    "qos": TEXT,
    "job_name": TEXT,
    "work_dir": TEXT,
    "script_signature": st.text("0123456789abcdef", min_size=16, max_size=16),
    "time_limit_minutes": U64,
    "time_min_minutes": U64,
    "mem_per_node_mb": U64,
    "mem_per_cpu_mb": U64,
    "min_cpus": U32,
    "cpus_per_task": U32,
    "num_tasks": U32,
    "min_nodes": U32,
    "gpus_per_node": U32,
    "tres_per_node": TEXT,
    "is_array": st.booleans(),
    "submit_time": st.integers(0, 2**53),
    "default_time_limit_minutes": U64,
}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries({}, optional=REQUEST_FIELDS), min_size=1, max_size=40))
def test_request_encoded_in_lua_parses_in_python(requests: list[dict[str, Any]]) -> None:
    encoded = _tool("encode", requests)
    for fields, hexed in zip(requests, encoded, strict=True):
        msg = pb.SubmitRequest.FromString(bytes.fromhex(hexed))
        for name in REQUEST_FIELDS:
            if name in fields:
                assert msg.HasField(name), name
                assert getattr(msg, name) == fields[name], name
            else:
                assert not msg.HasField(name), name
        # byte-for-byte what the Python runtime writes (fields in number order)
        assert msg.SerializeToString() == bytes.fromhex(hexed)


def test_job_desc_to_request_in_python_terms() -> None:
    script = "#!/bin/bash\n#SBATCH -n 8\nsrun hostname\n"
    job_desc = {
        "user_name": "alice",
        "user_id": 1000,
        "name": "train",
        "partition": "gpu",
        "account": None,
        "time_limit": 4294967294,
        "time_min": 30,
        "min_mem_per_cpu": 2048,
        "min_cpus": 8,
        "cpus_per_task": 65534,
        "num_tasks": 8,
        "min_nodes": 4294967294,
        "tres_per_node": "gres:gpu:a100:2",
        "array_inx": "1-10",
        "script": script,
    }
    # gpu has DefaultTime 90: slurmctld gives the job that limit, and accounting records it
    part_list = {"gpu": {"name": "gpu", "flag_default": 0, "default_time": 90, "max_time": 4294967295}}
    out = _tool("build", {"job_desc": job_desc, "submit_uid": 1000, "part_list": part_list})
    msg = pb.SubmitRequest.FromString(bytes.fromhex(out["hex"]))
    assert msg.user_name == "alice" and msg.user_id == 1000 and msg.job_name == "train"
    assert msg.partition == "gpu" and not msg.HasField("account")
    assert not msg.HasField("time_limit_minutes"), "NO_VAL means not given"
    assert msg.default_time_limit_minutes == 90, "the partition's DefaultTime, beside it"
    assert msg.time_min_minutes == 30
    assert msg.mem_per_cpu_mb == 2048 and not msg.HasField("mem_per_node_mb")
    assert msg.min_cpus == 8 and not msg.HasField("cpus_per_task") and msg.num_tasks == 8
    assert not msg.HasField("min_nodes")
    assert msg.gpus_per_node == 2 and msg.tres_per_node == "gres:gpu:a100:2"
    assert msg.is_array is True
    assert not msg.HasField("script_signature"), "sacct records no script: no model has it"
    assert msg.submit_time > 1_600_000_000


# --- Decision: serialized by Python, decoded in Lua -------------------------------------------------------

TARGET = st.builds(
    pb.TargetDecision,
    target=st.sampled_from([0, 1, 2, 3]),
    action=st.sampled_from([0, 1, 2]),
    predicted=st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, width=64)),
    quantile=st.one_of(st.none(), st.floats(0, 1)),
    new_value=st.one_of(st.none(), st.integers(0, 2**53)),
    reason=st.integers(0, 8),
    model_version=st.text(max_size=16),  # harp.pb takes 64 bytes of it at most (a version has 23)
    detail=TEXT,
)
DECISION = st.builds(
    pb.Decision,
    targets=st.lists(TARGET, max_size=4),
    user_message=TEXT,
    annotation=TEXT,
    mode=st.sampled_from(["off", "shadow", "rewrite", ""]),
)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(DECISION, min_size=1, max_size=40))
def test_decision_from_python_decodes_in_lua(decisions: list[pb.Decision]) -> None:
    decoded = _tool("decode", [d.SerializeToString().hex() for d in decisions])
    for want, got in zip(decisions, decoded, strict=True):
        assert "error" not in got, got
        assert got["user_message"] == want.user_message
        assert got["annotation"] == want.annotation
        assert got["mode"] == want.mode
        targets = got["targets"] or []  # cjson writes an empty list as {}
        assert len(targets) == len(want.targets)
        for t, w in zip(targets, want.targets, strict=True):
            assert (t["target"], t["action"], t["reason"]) == (w.target, w.action, w.reason)
            assert (t["model_version"], t["detail"]) == (w.model_version, w.detail)
            for name in ("predicted", "quantile", "new_value"):
                value = float(t[name]) if name in t else None
                assert value == (getattr(w, name) if w.HasField(name) else None), name


# Requests at the limits of their fields, and predictions up to float64's largest (a model's raw output
# goes through float(np.expm1()) on the calibrated path): the longest strings the daemon can write.
EXTREME_REQUEST = JobRequest(
    user_name="alice", time_limit_minutes=2**64 - 1, mem_per_node_mb=2**64 - 1, min_cpus=2**32 - 1
)
EXTREME_PREDICTIONS = (40.0, 2.0**63, float(np.finfo(np.float32).max), sys.float_info.max)


def test_the_daemons_longest_decisions_decode_in_lua() -> None:
    """Every mode, the guard alive or not, every target lowered or only annotated: harp.pb's bounds on
    each field (docs/faults.md) hold what the daemon sends."""
    decisions = [bad_request("DecodeError")]
    for mode, minutes, alive in itertools.product(Mode, EXTREME_PREDICTIONS, (True, False)):
        models = {t: FakeModel(minutes, version="20260101T000000.000000Z") for t in Target}
        policy = Policy(default_mode=mode, limits="quantile")
        predictor = Predictor(policy, vectorize, models, guard=Guard(alive))
        decisions.append(predictor.decide(EXTREME_REQUEST))
    wire = [decision_to_proto(d).SerializeToString() for d in decisions]
    decoded = _tool("decode", [w.hex() for w in wire])
    assert [got.get("error") for got in decoded] == [None] * len(wire), decoded
    longest = max(decisions, key=lambda d: len(d.annotation))
    # Its numbers capped at 2**53 (parse_tag reads no more): harp.apply appends every tag (<= 512).
    assert 100 < len(longest.annotation) <= 512, longest.annotation
    assert max(len(w) for w in wire) < 4096


def test_garbage_and_truncated_decisions_are_errors_not_crashes() -> None:
    good = pb.Decision(
        targets=[
            pb.TargetDecision(
                target=pb.TARGET_TIME,
                action=pb.ACTION_REWRITE,
                new_value=60,
                predicted=42.5,
                model_version="m",
            )
        ],
        user_message="hi",
        annotation="harp:x",
        mode="rewrite",
    ).SerializeToString()
    samples = [good[:n].hex() for n in range(len(good))] + [
        "ff" * 11,
        "0affffffff0f",
        "0b",
        "0a0508",
        os.urandom(64).hex(),
    ]
    results = _tool("decode", samples)
    assert len(results) == len(samples)
    assert any("error" in r for r in results)
    for r in results[len(good) :][:4]:
        assert "error" in r, r


# --- the tag the plugin writes, read back as harp report and the accuracy metrics read it --------------

# (job_desc, the CPUs decided, the CPUs the job gets): -n 2 -c 4 rounds 3 up to 2 per task; a
# --mem-per-cpu job keeps its CPUs (fewer would need more MB per CPU than the user's own).
CPU_CUTS = [
    ({"cpus_per_task": 4, "min_cpus": 8, "num_tasks": 2, "min_mem_per_node": 4000}, 3, 4),
    ({"cpus_per_task": 5, "min_cpus": 5, "num_tasks": 1, "min_mem_per_cpu": 1000}, 3, None),
    ({"cpus_per_task": 4, "min_cpus": 4, "num_tasks": 1, "min_mem_per_cpu": 1000}, 3, None),
]


@pytest.mark.parametrize(("job_desc", "decided", "applied"), CPU_CUTS)
def test_the_tag_written_gives_readers_the_cpus_applied(
    job_desc: dict[str, int], decided: int, applied: int | None
) -> None:
    """A value flagged "!" is the limit harp set (planned_limit, outcomes, harp explain): the plugin's
    tag holds the CPUs the job got, and no flag where it kept the job's own."""
    request = JobRequest(
        min_cpus=job_desc["min_cpus"],
        cpus_per_task=job_desc["cpus_per_task"],
        num_tasks=job_desc["num_tasks"],
        mem_per_node_mb=job_desc.get("min_mem_per_node"),
        mem_per_cpu_mb=job_desc.get("min_mem_per_cpu"),
    )
    cut = TargetDecision(
        Target.CPUS, Action.REWRITE, predicted=2.6, quantile=0.9, new_value=decided, model_version="cpus@1"
    )
    decision = Decision((cut,), "", annotation_for(Mode.REWRITE, (cut,), request), Mode.REWRITE.value)
    assert f"c!={decided}/q0.9" in decision.annotation
    wire = decision_to_proto(decision).SerializeToString().hex()
    got = _tool("apply", {"job_desc": job_desc, "decision": wire, "submit_uid": 1000})
    tag = parse_tag(got["admin_comment"])
    assert tag is not None, got
    job = JobRecord(job_id="1", request=request, state="COMPLETED", elapsed_s=60)
    planned = planned_limit(job, tag, "c", Mode.REWRITE, Policy())
    if applied is None:
        assert got["min_cpus"] == job_desc["min_cpus"]
        assert (tag.values["c"], tag.flags["c"]) == (decided, "")  # the prediction, nothing changed
        assert math.isnan(planned)
    else:
        assert got["min_cpus"] == applied
        assert (tag.values["c"], tag.flags["c"]) == (applied, "!")
        assert planned == applied
    assert tag.own["c"] == job_desc["min_cpus"]


# sbatch -n 4 --mem-per-cpu=4000 and its nodes: (job_desc's min_nodes, max_nodes, ntasks_per_node), the
# node count accounting records (ReqNodes: 1 without -N), the least CPUs Slurm may give a node (one
# task's, unless -N 1 or --ntasks-per-node pins more there) and the MB per CPU the plugin sets for the
# daemon's floor of 1024 MB per node.
NO_VAL, NO_VAL16 = 4294967294, 65534
PER_CPU_NODES = [
    ((NO_VAL, NO_VAL, NO_VAL16), 1, 1, 1024),  # no -N: up to 4 nodes of one task
    ((2, 4, NO_VAL16), 2, 1, 1024),  # -N 2-4
    ((2, 2, NO_VAL16), 2, 1, 1024),  # -N 2: cons_tres may put 3 tasks on one node and 1 on the other
    ((1, 1, NO_VAL16), 1, 4, 256),  # -N 1: all four on the node
    ((2, 2, 2), 2, 2, 512),  # -N 2 --ntasks-per-node=2
]


@pytest.mark.parametrize(("nodes", "accounted_nodes", "fewest", "per_cpu"), PER_CPU_NODES)
def test_a_per_cpu_memory_cut_keeps_the_floor_on_every_node_and_its_request_comes_back(
    nodes: tuple[int, int, int], accounted_nodes: int, fewest: int, per_cpu: int
) -> None:
    """The daemon decides MB per node (its floor, 1024 MB); the plugin sets MB per CPU such that the
    node of fewest CPUs gets at least that, and the tag's m0 (the user's MB per node as the daemon
    counts it) gives the user's own MB per CPU back to training (as_submitted), whatever the spread."""
    min_nodes, max_nodes, ntpn = nodes
    job_desc = {"user_name": "alice", "time_limit": 120, "min_mem_per_cpu": 4000, "min_cpus": 4,
                "num_tasks": 4, "cpus_per_task": NO_VAL16, "pn_min_cpus": NO_VAL16, "ntasks_per_node": ntpn,
                "min_nodes": min_nodes, "max_nodes": max_nodes}  # fmt: skip
    sent = _tool("build", {"job_desc": job_desc, "submit_uid": 1000})["hex"]
    request = request_from_proto(pb.SubmitRequest.FromString(bytes.fromhex(sent)))
    cut = Policy().decide(Target.MEMORY, request, Mode.REWRITE, 300.0, 0.9, "memory@1")
    assert (cut.action, cut.new_value) == (Action.REWRITE, 1024)
    decision = Decision((cut,), "", annotation_for(Mode.REWRITE, (cut,), request), Mode.REWRITE.value)
    wire = decision_to_proto(decision).SerializeToString().hex()
    got = _tool("apply", {"job_desc": job_desc, "decision": wire, "submit_uid": 1000})
    assert got["min_mem_per_cpu"] == per_cpu
    assert got["min_mem_per_cpu"] * fewest >= 1024, "the node of fewest CPUs keeps the floor"
    tag = parse_tag(got["admin_comment"])
    assert tag is not None and tag.flags["m"] == "!"
    assert tag.values["m"] == per_cpu * 4 // accounted_nodes  # MB per node as the daemon counts it
    # accounting: the MB per CPU harp set, the job's CPUs and its ReqNodes; the tag its user's own
    shown = JobRequest(user_name="alice", time_limit_minutes=120, mem_per_cpu_mb=got["min_mem_per_cpu"],
                       min_cpus=got["min_cpus"], min_nodes=accounted_nodes)  # fmt: skip
    record = JobRecord("1", shown, "COMPLETED", 60, harp_tag=got["admin_comment"])
    submitted = as_submitted(record).request
    assert submitted.mem_per_cpu_mb == 4000
    assert submitted.requested(Target.MEMORY) == request.requested(Target.MEMORY) == tag.own["m"]


# --- the tag as harp guard reads it: harp.tag_parse against core/tag.py's parse_tag ----------------------


def _guard_reads(token: str) -> dict[str, Any]:
    """What parse_tag reads of ``token`` that the guard extends a job by, as harp.tag_parse answers."""
    tag = parse_tag(token)
    if tag is None:
        return {"tag": False}
    out: dict[str, Any] = {"tag": True}
    if "t" in tag.flags:
        out["flag"], out["t"] = tag.flags["t"], tag.values["t"]
    if "t" in tag.own:
        out["t0"] = tag.own["t"]
    return out


def _lua_reads(tokens: list[str]) -> list[dict[str, Any]]:
    answers = _tool("read_tag", [t.encode().hex() for t in tokens])
    for a in answers:
        for key in ("t", "t0"):
            if key in a:
                a[key] = int(a[key])
    return list(answers)


# Tags at the edges of parse_tag's grammar: each item's form, the digit cap (16 digits, 2**53, the last
# item of a key counting), the suffixes and their order, empty and unknown items, the mode.
EDGE_TAGS = [
    "harp:extend,t!=60,t0=120,v=m",
    "harp:time_min,t~=60/q0.9/k,t0=120,m=5,c=2/k,v=",
    "harp:extend",
    "harp:extend,",
    "harp:extend,,",
    "harp:extend,t!=60,",
    "harp:extend,t!=60,t0=120,,v=m",
    "harp:extend,t!=60,t0=120,g=2,v=m",
    "harp:extend,t!=60/q0.9x,t0=120,v=m",
    "harp:extend,t!=60/k/q0.9,t0=120",
    "harp:extend,t!=60/q,t0=120",
    "harp:extend,t!=60/q1e-3,t0=120",
    "harp:extend,t!=60/q.-e,t0=120",
    "harp:extend,t!=60,t0=120/k",
    "harp:extend,t!=60,t0!=120",
    "harp:extend,t!!=60,t0=120",
    "harp:extend,t!=,t0=120",
    "harp:extend,t!=60,t0=",
    "harp:extend,t!=9007199254740992,t0=9007199254740992",
    "harp:extend,t!=9007199254740993,t0=120",
    "harp:extend,t!=60,t0=9007199254740993",
    "harp:extend,t!=9999999999999999,t!=60,t0=120",
    "harp:extend,m=9999999999999999,t!=60,t0=120",
    "harp:extend,t!=60,t0=120,c0=9007199254740993",
    "harp:extend,t!=0000000000000060,t0=0000000000000120",
    "harp:extend,t!=00000000000000060,t0=120",
    "harp:extend,t!=60,t0=12345678901234567",
    "harp:extend,t!=60,t=50,t0=120",
    "harp:extend,t!=60,t0=120,t0=5",
    "harp:extend,t!=\u0661\u0660,t0=120",  # Arabic-Indic digits
    "harp:extend,t!=60,t0=120,v=a,b",
    "harp:extend,t!=60,t0=120,v=é+x",
    "harp:extend,v=m,t!=60,t0=120",
    "harp:extendx,t!=60,t0=120",
    "harp:EXTEND,t!=60,t0=120",
    "harp:,t!=60",
    "harp=extend,t!=60,t0=120",
    "xharp:extend,t!=60,t0=120",
    *(f"harp:{mode.value},t!=60,t0=120" for mode in Mode),
]


def test_the_lua_tag_grammar_reads_the_edge_tags_as_parse_tag() -> None:
    """harp.apply cuts a limit in extend and time_min modes only under a tag harp.tag_parse reads as
    that cut; the guard reads it with parse_tag: the two must read every tag alike."""
    assert _lua_reads(EDGE_TAGS) == [_guard_reads(t) for t in EDGE_TAGS]


# Random tags: numbers mostly small, some near 2**53; suffixes parse_tag reads and ones it does not.
_SMALL = st.integers(0, 10**5).map(str)
_NUMBER = st.one_of(
    _SMALL,
    _SMALL,
    _SMALL,
    st.integers(0, 2**53 + 2).map(str),
    st.sampled_from(["9007199254740992", "9007199254740993", "9999999999999999", "0000000000000060"]),
)
_BAD_NUMBER = st.one_of(
    st.text("0123456789", max_size=18), st.sampled_from(["", "\u0661\u0660", "6x", "-1", "00000000000000060"])
)
_GOOD_SUFFIX = st.sampled_from(["", "/q0.9", "/q1e-3", "/q.-e", "/k", "/q0.9/k"])
_BAD_SUFFIX = st.sampled_from(["/q", "/k/q0.9", "/k/k", "x", "x/k", "/q0.9x", "/q1x/k", "/Q1", "/q0.9/kx"])


def _item(key: str, flag: str, number: str, suffix: str) -> str:
    return f"{key}{flag}={number}{suffix}"


_VALUE = st.builds(_item, st.sampled_from("tmc"), st.sampled_from(["", "!", "~"]), _NUMBER, _GOOD_SUFFIX)
_OWN = st.builds(_item, st.sampled_from(["t0", "m0", "c0"]), st.just(""), _NUMBER, st.just(""))
# Any characters but the whitespace that splits admin_comment into tokens (and surrogates, no UTF-8).
_NO_SPACE = st.characters(exclude_characters=" \t\n\v\f\r", exclude_categories=["Cs"])
_VERSIONS = st.text(_NO_SPACE.filter(lambda ch: ch != ","), max_size=8)
# Items parse_tag reads no tag by: a bad key, flag, number or suffix, an own value with a suffix, junk.
_BAD = st.one_of(
    st.builds(
        _item, st.sampled_from("tmcvgT"), st.sampled_from(["", "!", "~", "!!", "?"]), _NUMBER, _BAD_SUFFIX
    ),
    st.builds(_item, st.sampled_from("tmc"), st.sampled_from(["", "!", "~", "0"]), _BAD_NUMBER, _GOOD_SUFFIX),
    st.builds(_item, st.sampled_from(["t0", "m0", "c0"]), st.just(""), _NUMBER, _GOOD_SUFFIX.filter(bool)),
    st.text("tmcv0129!~=/qk.e-x\u0661", max_size=10),
)
_ITEMS = st.one_of(_VALUE, _VALUE, _VALUE, _OWN, _OWN, _VERSIONS.map(lambda v: "v=" + v), _BAD)
_TOKEN = st.builds(
    lambda prefix, mode, items, end: prefix + mode + ("," + ",".join(items) if items else "") + end,
    st.sampled_from(["harp:"] * 6 + ["harp=", "xharp:"]),
    st.sampled_from([*(m.value for m in Mode)] * 3 + ["", "extendx", "EXTEND"]),
    st.lists(_ITEMS, max_size=6),
    st.sampled_from(["", "", "", ","]),
)
# Tags shaped as the guard's: a time item and t0 among other items, good or not.
_GUARDED = st.builds(
    lambda mode, before, time, t0, after: f"harp:{mode}," + ",".join([*before, time, t0, *after]),
    st.sampled_from(["extend", "time_min"]),
    st.lists(_ITEMS, max_size=1),
    st.builds(_item, st.just("t"), st.sampled_from(["!", "~", ""]), _NUMBER, _GOOD_SUFFIX),
    st.builds(_item, st.just("t0"), st.just(""), _NUMBER, st.just("")),
    st.lists(_ITEMS, max_size=1),
)
# Any text after a guarded mode's prefix.
_SOUP = st.text(_NO_SPACE, max_size=30).map(lambda s: "harp:extend," + s)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_TOKEN, _GUARDED, _SOUP), min_size=100, max_size=200))
def test_the_lua_tag_grammar_reads_random_tags_as_parse_tag(tokens: list[str]) -> None:
    """The two grammars cannot drift: a change to parse_tag fails here until harp.tag_parse follows."""
    assert _lua_reads(tokens) == [_guard_reads(t) for t in tokens]


# A time cut in extend mode, a time_min in time_min mode (60 min of the job's 120), under the daemon's
# tag: ones the guard reads as that change, and ones it does not (an unknown or empty item, 17 digits,
# a suffix it cannot read, another value or flag than applied, the time item not last).
GUARDED_TAGS = [
    "{mode},t{flag}=60,t0=120,v=m",
    "{mode},t{flag}=60/q0.9/k,t0=120,v=m",
    "{mode},t{flag}=60,t0=120,g=2,v=m",
    "{mode},t{flag}=60,t0=120,,v=m",
    "{mode},t{flag}=60,t0=120,m=12345678901234567,v=m",
    "{mode},t{flag}=60/q0.9x,t0=120,v=m",
    "{mode},t{flag}=90,t0=120,v=m",
    "{mode},t!=60,t~=60,t0=120,v=m",
    "{mode},t{flag}=60,t=60,t0=120,v=m",
    "{mode},t{flag}=60,t0=120,v=m,",
]


@pytest.mark.parametrize("mode", [Mode.EXTEND, Mode.TIME_MIN])
@pytest.mark.parametrize("shape", GUARDED_TAGS)
def test_a_guarded_time_change_is_made_only_under_a_tag_the_guard_reads_as_it(mode: Mode, shape: str) -> None:
    """The guard extends a job by its tag alone (parse_tag): a cut under a tag it reads otherwise, or
    not at all, would stand until Slurm killed the job there, before its user's own limit."""
    flag, field = ("!", "time_limit") if mode is Mode.EXTEND else ("~", "time_min")
    action = pb.ACTION_REWRITE if mode is Mode.EXTEND else pb.ACTION_SET_TIME_MIN
    decision = pb.Decision(
        targets=[pb.TargetDecision(target=pb.TARGET_TIME, action=action, new_value=60, model_version="m")],
        annotation="harp:" + shape.format(mode=mode.value, flag=flag),
        mode=mode.value,
    )
    job_desc = {"user_name": "alice", "time_limit": 120, "time_min": NO_VAL, "min_mem_per_node": 4000}
    got = _tool(
        "apply", {"job_desc": job_desc, "decision": decision.SerializeToString().hex(), "submit_uid": 1000}
    )
    tag = parse_tag(got["admin_comment"])
    if got[field] == 60:
        assert tag is not None and tag.extendable_minutes == 120, got["admin_comment"]
        assert (tag.flags["t"], tag.values["t"]) == (flag, 60), got["admin_comment"]
    else:
        assert (got["time_limit"], got["time_min"]) == (120, NO_VAL), "left as submitted"
        assert tag is None or tag.extendable_minutes is None, got["admin_comment"]
    # the daemon's tag the guard reads as the change: the change is made
    if shape in GUARDED_TAGS[:2]:
        assert got[field] == 60


# --- script signature: the Python twin a harvester would use ----------------------------------------------


# Batch scripts whose signatures the plugin, the advice's reader and _signature must agree on.
SIGNED_SCRIPTS = [
    "#!/bin/bash\n#SBATCH -t 10\n#SBATCH --mem=1G\necho hi\n",
    "#!/bin/sh\n\n# note\n#SBATCH -J x   \r\n#SBATCH -c 4\n\tpython run.py\n#SBATCH --late\n",
    "#!/bin/bash\necho no directives\n",
    "#SBATCH --comment=" + "é" * 700 + "\n",
    # a directive that starts within the first 64 KiB and runs past them: both cut it there
    "#!/bin/bash\n" + ("#" + "p" * 99 + "\n") * 643 + "#SBATCH --comment=" + "x" * 1000 + "\n",
]


def _signature(script: str) -> str | None:
    """Reference of plugin/harp/script_signature.lua (FNV-1a 64 over the #SBATCH header lines)."""
    lines: list[bytes] = []
    data = script.encode()[: 65536 + 1]
    pos = 0
    for seen, raw in enumerate(data.split(b"\n")):
        if pos >= 65536 or seen >= 1024:
            break
        pos += len(raw) + 1
        line = raw[:1024]
        if line.startswith(b"#SBATCH"):
            lines.append(line.rstrip(b" \t\r\n\v\f"))
            if len(lines) >= 256:
                break
        elif line.strip() and not line.lstrip().startswith(b"#"):
            break
    if not lines:
        return None
    h = 0xCBF29CE484222325
    for b in b"\n".join(lines)[:2048]:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return f"{h:016x}"


@pytest.mark.parametrize("script", SIGNED_SCRIPTS)
def test_signature_matches_python_reference(script: str) -> None:
    assert (_tool("signature", script) or None) == _signature(script)
