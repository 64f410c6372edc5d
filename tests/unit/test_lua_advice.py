"""The cli_filter hook's protobuf against the real runtime: the AdviceRequest the Lua side builds from
sbatch's options is what `harp advise --script` builds from the same #SBATCH lines, and any Advice
the daemon can write decodes in Lua."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_harp.advice.script import parse_script
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.cli import build_parser
from slurm_harp.commands.advise import build_request
from slurm_harp.server.convert import request_from_proto
from tests.conftest import REPO, lua51

TOOL = REPO / "tests" / "lua" / "pb_tool.lua"
NO_TIME = "2982616-04:14:00"  # how sbatch 22.05 shows a time never given
# An integer option never given shows as NO_VAL printed as an int (COMMON_INT_OPTION_GET): "-2"; the
# directory without -D is the one sbatch runs in (arg_reset_chdir). A real sbatch shows these:
# tests/e2e/test_cli_filter_options_e2e.py.
HERE = "/home/ann/run"
UNSET = {"type": "sbatch", "time": NO_TIME, "ntasks": "1", "cpus-per-task": "0", "nodes": "1-0",
         "exclusive": "unset", "argv": [], "ntasks-per-node": "-2", "sockets-per-node": "-2",
         "ntasks-per-socket": "-2", "ntasks-per-gpu": "-2", "ntasks-per-tres": "-2",
         "cores-per-socket": "-2", "threads-per-core": "-2", "chdir": HERE}  # fmt: skip


def _tool(mode: str, payload: Any) -> Any:
    proc = subprocess.run(
        [lua51(), str(TOOL), mode], input=json.dumps(payload), capture_output=True, text=True, timeout=60,
        cwd=REPO, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# (options as sbatch 22.05 shows them in pre_submit, the same job as #SBATCH lines)
SAME_JOB = [
    ({"job-name": "relax", "ntasks": "2", "cpus-per-task": "3", "nodes": "2", "time": "01:30:00",
      "mem": "4G", "partition": "batch,debug"},
     "-J relax\n-n 2\n-c 3\n-N 2\n-t 1:30:00\n--mem=4G\n-p batch,debug"),
    ({"job-name": "train", "gpus-per-node": "a100:2", "mem-per-cpu": "500", "time": "1-02:00:00"},
     "-J train\n--gpus-per-node=a100:2\n--mem-per-cpu=500\n-t 1-02:00:00"),
    ({"job-name": "wide", "ntasks-per-node": "4", "nodes": "3", "gres": "gres:gpu:2"},
     "-J wide\n--ntasks-per-node=4\n-N 3\n--gres=gpu:2"),
    ({"job-name": "spread", "gpus": "8", "nodes": "3"}, "-J spread\n--gpus=8\n-N 3"),
    ({"job-name": "nodes", "nodes": "4", "cpus-per-task": "2"}, "-J nodes\n-N 4\n-c 2"),  # a task per node
    ({"job-name": "range", "nodes": "2-4"}, "-J range\n-N 2-4"),
    ({"job-name": "plain"}, "-J plain"),  # (sbatch shows "-n 1" as it shows no -n: both send no count)
    ({"job-name": "whole", "mem": "0?"}, "-J whole\n--mem=0"),  # all of a node: sbatch shows "0?"
    # A type without a count is one GPU; a B after a memory unit is sbatch's too (str_to_mbytes), and
    # K rounds up; getopt gives a short option the rest of its word, "=" and all.
    ({"job-name": "typed", "gres": "gres:gpu:a100"}, "-J typed\n--gres=gpu:a100"),
    ({"job-name": "typed", "gpus-per-node": "a100"}, "-J typed\n--gpus-per-node=a100"),
    ({"job-name": "bytes", "mem": "4G"}, "-J bytes\n--mem=4GB"),
    ({"job-name": "kb", "mem-per-cpu": "1"}, "-J kb\n--mem-per-cpu=1kb"),
    ({"job-name": "=foo"}, "-J=foo"),
    # sbatch's getopt_long reads a prefix only one option begins with as that option, and
    # --tasks-per-node as --ntasks-per-node: the hook sees the option's own name.
    ({"job-name": "part", "partition": "batch", "mem-per-cpu": "100"},
     "--job=part\n--part=batch\n--mem-per-c=100"),
    ({"job-name": "tpn", "ntasks-per-node": "4", "nodes": "2"}, "-J tpn\n--tasks=4\n-N 2"),
    # sbatch splits the lines itself (get_argument): an unquoted # ends one; the hook sees the first
    # component of a heterogeneous job alone.
    ({"job-name": "relax", "partition": "short", "ntasks": "4"},
     "-J relax#2\n-p short        # the long partition: -p long\n--ntasks=4      # big meshes: --ntasks=64"),
    ({"job-name": "het", "partition": "cpu", "ntasks": "4"},
     "-J het -p cpu -n 4\nhetjob\n-p gpu -n 1 --gpus-per-node=2"),
    # The QOS and the account: a partition's Allow/Deny lists admit by them.
    ({"job-name": "q", "qos": "debug", "account": "phys"}, "-J q\n-q debug\n-A phys"),
    ({"job-name": "q", "qos": "long"}, "-J q\n--qos=long"),
    # What the models read besides the size: --time-min, an array, the directory (before, only the hook
    # sent them, so the script's advice could differ from the line's for the same job).
    ({"job-name": "tm", "time-min": "00:30:00", "array": "1-4%2", "chdir": "/scratch/run"},
     "-J tm\n--time-min=30 -a 1-4%2\n-D /scratch/run"),
    # Whole nodes: cli_filter shows --exclusive and --oversubscribe (-s) as one field, the last given.
    ({"job-name": "own", "exclusive": "exclusive"}, "-J own\n--exclusive"),
    ({"job-name": "own", "exclusive": "exclusive"}, "-J own\n--exclus"),
    ({"job-name": "own", "exclusive": "user"}, "-J own\n--exclusive=user"),
    ({"job-name": "own", "exclusive": "mcs"}, "-J own\n--exclusive=MCS"),
    ({"job-name": "own", "exclusive": "oversubscribe"}, "-J own\n--exclusive\n-s"),
    # -N without -n: a task a node, times the sockets, cores and threads asked where -N is no range
    # (sbatch's _opt_verify, after the hook); -B sets the same fields the hook reads.
    ({"job-name": "lay", "nodes": "2", "sockets-per-node": "2", "cores-per-socket": "2",
      "threads-per-core": "1"},
     "-J lay\n-N 2 --sockets-per-node=2 --cores-per-socket=2 --threads-per-core=1"),
    ({"job-name": "lay", "nodes": "1", "sockets-per-node": "1", "cores-per-socket": "2"},
     "-J lay\n-N 1 -B 1:2"),
    ({"job-name": "lay", "nodes": "2-4", "cores-per-socket": "2"}, "-J lay\n-N 2-4 --cores-per-socket=2"),
]  # fmt: skip


# GPUs asked per task or per socket, and --ntasks-per-gpu, which neither side read (both gave no GPU):
# (options as sbatch shows them, the same job as #SBATCH lines, the GPUs per node accounting records:
# ReqTRES gres/gpu over ReqNodes, rounded up, by plugin/harp/gpus.lua's rule, which
# tests/e2e/test_gpus_e2e.py proves against slurmctld). Both sides must give these, not merely the same.
GPU_JOBS = [
    ({"ntasks": "4", "gpus-per-task": "1"}, "-n 4 --gpus-per-task=1", 4),
    ({"nodes": "2", "ntasks-per-node": "2", "gpus-per-task": "1"},
     "-N 2 --ntasks-per-node=2 --gpus-per-task=1", 2),
    ({"ntasks": "2", "gpus-per-task": "a100:2"}, "--gpus-per-task=a100:2 -n 2", 4),
    ({"ntasks": "2", "gpus-per-task": "a100:1,v100:1"}, "--gpus-per-task=a100:1,v100:1 -n 2", 4),
    # no task count: one task, by gpus.lua's rule (sbatch 22.05 then refuses the job, after the hook)
    ({"gpus-per-task": "1"}, "--gpus-per-task=1", 1),
    ({"nodes": "2", "gpus-per-task": "1"}, "-N 2 --gpus-per-task=1", 1),  # a task a node
    ({"nodes": "2", "cpus-per-task": "4", "gpus-per-task": "2"},
     "-N 2 -c 4 --gpus-per-task=2", 1),
    # a node range: no task count derived, one task (tasks, the CPUs, still 2 a node on both sides)
    ({"nodes": "2-4", "ntasks-per-node": "2", "gpus-per-task": "1"},
     "-N 2-4 --ntasks-per-node=2 --gpus-per-task=1", 1),
    ({"nodes": "2", "sockets-per-node": "2", "gpus-per-task": "1"},
     "-N 2 --sockets-per-node=2 --gpus-per-task=1", 2),
    ({"nodes": "1", "sockets-per-node": "2", "gpus-per-socket": "1"},
     "--gpus-per-socket=1 -N 1 --sockets-per-node=2", 2),
    ({"nodes": "2", "sockets-per-node": "2", "gpus-per-socket": "a100:2"},
     "--gpus-per-socket=a100:2 -N 2 --sockets-per-node=2", 4),
    ({"ntasks": "5", "ntasks-per-socket": "2", "gpus-per-socket": "1"},
     "-n 5 --ntasks-per-socket=2 --gpus-per-socket=1", 3),
    ({"gpus-per-socket": "2"}, "--gpus-per-socket=2", 2),
    # -N with a layout and no -n: sbatch sends a task per socket, core and thread asked (both sides
    # counted the sockets alone, the script reader only --sockets-per-node: 1 GPU a node each)
    ({"nodes": "2", "cores-per-socket": "2", "gpus-per-task": "1"},
     "-N 2 --cores-per-socket=2 --gpus-per-task=1", 2),
    ({"nodes": "1", "sockets-per-node": "1", "cores-per-socket": "2", "gpus-per-task": "1"},
     "-N 1 -B 1:2 --gpus-per-task=1", 2),
    ({"nodes": "2-4", "cores-per-socket": "2", "gpus-per-task": "1"},
     "-N 2-4 --cores-per-socket=2 --gpus-per-task=1", 1),  # a range: no task count sent
    ({"nodes": "1", "sockets-per-node": "1", "gpus-per-socket": "2"}, "-N 1 -B 1 --gpus-per-socket=2", 2),
    ({"ntasks": "8", "ntasks-per-gpu": "2"}, "-n 8 --ntasks-per-gpu=2", 4),
    ({"nodes": "2", "ntasks-per-gpu": "2"}, "-N 2 --ntasks-per-gpu=2", 1),
    ({"ntasks": "8", "ntasks-per-tres": "4"}, "-n 8 --ntasks-per-tres=4", 2),
    # asked two ways: per GPU type the largest, the types added up
    ({"nodes": "2", "gpus": "4", "gpus-per-node": "1"}, "-N 2 --gpus=4 --gpus-per-node=1", 2),
    ({"ntasks": "3", "gres": "gres:gpu:a100:1", "gpus-per-task": "a100:1"},
     "-n 3 --gres=gpu:a100:1 --gpus-per-task=a100:1", 3),
    ({"ntasks": "2", "gpus": "v100:1", "gpus-per-task": "a100:1"},
     "-n 2 --gpus=v100:1 --gpus-per-task=a100:1", 3),
]  # fmt: skip
GPUS_PER_NODE = {f"-J gpu\n{directives}": gpus for _, directives, gpus in GPU_JOBS}
# The tasks of the layout cases above (a 2-node cluster's slurmctld held -N 1 -B 1:2 as 2 tasks:
# tests/e2e/test_advise_script_e2e.py::test_harp_advise_counts_tasks_and_nodes_as_sbatch_does).
TASKS = {
    "-J lay\n-N 2 --sockets-per-node=2 --cores-per-socket=2 --threads-per-core=1": 8,
    "-J lay\n-N 1 -B 1:2": 2,
    "-J lay\n-N 2-4 --cores-per-socket=2": 2,
}
SAME_JOB += [({"job-name": "gpu"} | options, f"-J gpu\n{directives}") for options, directives, _ in GPU_JOBS]


@pytest.mark.parametrize(("options", "directives"), SAME_JOB)
def test_sbatch_options_give_the_request_harp_advise_gives(options: dict[str, str], directives: str) -> None:
    ((result,),) = [_tool("advice_request", [UNSET | options])]
    msg = pb.AdviceRequest.FromString(bytes.fromhex(result["hex"]))
    assert msg.SerializeToString() == bytes.fromhex(result["hex"])  # canonical: fields in number order
    lua = request_from_proto(msg.job)
    script = "#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives.split("\n")) + "true\n"
    python = parse_script(script, cwd=HERE).request
    for name in ("job_name", "partition", "account", "qos", "time_limit_minutes", "mem_per_node_mb",
                 "mem_per_cpu_mb", "min_cpus", "cpus_per_task", "num_tasks", "min_nodes",
                 "gpus_per_node", "time_min_minutes", "work_dir"):  # fmt: skip
        assert getattr(lua, name) == getattr(python, name), name
    assert bool(lua.is_array) is bool(python.is_array)  # the hook sends false, the script none: one feature
    if directives in GPUS_PER_NODE:
        assert python.gpus_per_node == GPUS_PER_NODE[directives], directives
    if directives in TASKS:
        assert python.num_tasks == TASKS[directives], directives
    assert msg.exclusive == parse_script(script).exclusive == (options.get("exclusive") == "exclusive")
    assert not msg.partitions and not msg.HasField("deadline_minutes") and not msg.HasField("training")


def test_a_script_without_j_is_named_alike_by_the_hook_and_harp_advise(tmp_path: Path) -> None:
    script = tmp_path / "relax.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH -n 4\nsrun ./relax\n")
    ((result,),) = [_tool("advice_request", [UNSET | {"ntasks": "4", "argv": [str(script)]}])]
    lua = pb.AdviceRequest.FromString(bytes.fromhex(result["hex"])).job
    python = build_request(build_parser().parse_args(["advise", "--script", str(script)])).job
    assert lua.job_name == python.job_name == "relax.sbatch"


# cjson prints 14 digits: integers stay below 2^40 here (doubles travel as "%.17g" text)
FINITE = st.floats(0, 1e9, allow_nan=False)
OPTION = st.builds(
    pb.AdviceOption,
    partition=st.text(max_size=12), size=st.integers(0, 2**32 - 1), cpus=st.integers(0, 2**32 - 1),
    nodes=st.integers(0, 2**32 - 1), gpus=st.integers(0, 2**32 - 1), mem_per_node_mb=st.integers(0, 2**40),
    evidence=st.text(max_size=20), priced=st.booleans(), time_limit_minutes=st.integers(0, 2**40),
    expected_minutes=FINITE, longest_minutes=st.floats(0, math.inf, allow_nan=False), expected_cost=FINITE,
    rate=FINITE, expected_attempts=FINITE, p_unfinished=st.floats(0, 1), note=st.text(max_size=20),
)  # fmt: skip


@st.composite
def advices(draw: st.DrawFn) -> pb.Advice:
    options = draw(st.lists(OPTION, max_size=6))
    index = st.integers(0, max(len(options) - 1, 0))
    advice = pb.Advice(
        user_name=draw(st.text(max_size=10)), job_name=draw(st.text(max_size=10)),
        unit=draw(st.sampled_from(["CPU", "GPU"])), currency=draw(st.text(max_size=5)),
        evidence=draw(st.text(max_size=20)), options=options, notes=draw(st.lists(st.text(max_size=10))),
        pareto=draw(st.lists(index, max_size=3)),
    )  # fmt: skip
    for name in ("cheapest", "fastest"):
        present: bool = draw(st.booleans())
        if options and present:
            setattr(advice, name, draw(index))
    return advice


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(advices(), min_size=1, max_size=30))
def test_advice_from_python_decodes_in_lua(answers: list[pb.Advice]) -> None:
    decoded = _tool("advice", [a.SerializeToString().hex() for a in answers])
    for want, got in zip(answers, decoded, strict=True):
        assert "error" not in got, got
        a = got["advice"]
        for name in ("user_name", "job_name", "unit", "currency", "evidence"):
            assert a[name] == getattr(want, name), name
        assert (a["notes"] or []) == list(want.notes)  # cjson writes an empty list as {}
        for name in ("cheapest", "fastest"):
            assert a.get(name) == (getattr(want, name) if want.HasField(name) else None), name
        options = a["options"] or []
        assert len(options) == len(want.options)
        for o, w in zip(options, want.options, strict=True):
            for name in ("partition", "size", "cpus", "nodes", "gpus", "mem_per_node_mb", "evidence",
                         "priced", "time_limit_minutes", "note"):  # fmt: skip
                assert o[name] == getattr(w, name), name
            for name in ("expected_minutes", "longest_minutes", "expected_cost", "rate", "p_unfinished"):
                assert float(o[name]) == getattr(w, name), name


def test_a_daemon_answer_becomes_the_line() -> None:
    answer = pb.Advice(
        unit="CPU", currency="EUR", evidence="1 run at 1 CPU, 1 at 2 CPUs", cheapest=1,
        options=[
            pb.AdviceOption(partition="batch", size=1, cpus=1, nodes=1, priced=True, expected_minutes=40,
                            expected_cost=2 / 3),
            pb.AdviceOption(partition="batch", size=2, cpus=2, nodes=1, priced=True, expected_minutes=12,
                            expected_cost=0.4),
            pb.AdviceOption(partition="batch", size=4, cpus=4, nodes=1, evidence="no evidence"),
        ],
    )  # fmt: skip
    ((got,),) = [_tool("advice", [answer.SerializeToString().hex()])]
    assert got["line"] == (
        "harp: 2 CPUs in batch would take ~12 min and cost ~0.4 EUR (you asked 1 CPU: ~40 min, ~0.67 EUR); "
        "harp advise for more"
    )


def test_garbage_advice_is_an_error_not_a_crash() -> None:
    option = pb.AdviceOption(partition="b", size=1, priced=True)
    good = pb.Advice(unit="CPU", options=[option]).SerializeToString()
    samples = [good[:n].hex() for n in range(1, len(good))] + ["ff" * 11, "0b", os.urandom(64).hex()]
    results = _tool("advice", samples)
    assert len(results) == len(samples)
    assert all("error" in r for r in results[len(good) - 1 : len(good) + 1]), results
