"""A GPU job is served with the GPUs per node training gave it: the request the Lua plugin builds from
job_desc (as sbatch 22.05 sends --gpus, --gpus-per-task, --gpus-per-node) and the record the sacct
reader builds from the job's accounting line (ReqTRES gres/gpu, ReqNodes) give the same feature."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from slurm_harp.accounting.sacct import read_sacct
from slurm_harp.api import predictor_pb2 as pb
from slurm_harp.core.features import FEATURE_NAMES, vectorize
from slurm_harp.server.convert import request_from_proto
from tests.conftest import REPO, lua51

LUA = lua51()
NO_VAL, NO_VAL16 = 4294967294, 65534
GPUS = FEATURE_NAMES.index("gpus_per_node")
NODES = FEATURE_NAMES.index("log_nodes")
HEADER = (
    "JobIDRaw|JobID|User|Partition|State|ElapsedRaw|TimelimitRaw|ReqCPUS|ReqNodes|NNodes|ReqTRES"
    "|Submit|Start|End"
)


def _desc(field: str, spec: str, nodes: int = NO_VAL, tasks: int = NO_VAL) -> dict[str, Any]:
    """job_desc's GPU fields for ``-N nodes`` (min = max) and ``-n tasks``; NO_VAL: not given."""
    return {field: spec, "min_nodes": nodes, "max_nodes": nodes, "num_tasks": tasks}


# job_desc as the plugin gets it from sbatch (src/common/slurm_opt.c: --gpus -> tres_per_job,
# --gpus-per-task -> tres_per_task, each "gres:gpu:" and the user's text; no -N: min_nodes NO_VAL;
# -N 2 without -n: sbatch sets num_tasks 2 for --gpus-per-task), and what slurmctld records for the
# job, gres/gpu in ReqTRES and ReqNodes (gres_job_state_validate at submission: --gpus N;
# --gpus-per-node N x nodes; --gpus-per-task N x tasks; ReqNodes: -N, else 1), as a real slurmctld
# shows them (tests/e2e/test_gpus_e2e.py).
CASES: dict[str, tuple[dict[str, Any], int, int]] = {
    "--gpus=4": (_desc("tres_per_job", "gres:gpu:4"), 4, 1),
    "-N 2 --gpus=4": (_desc("tres_per_job", "gres:gpu:4", nodes=2), 4, 2),
    "-N 2 --gpus=3": (_desc("tres_per_job", "gres:gpu:3", nodes=2), 3, 2),
    "--gpus=a100:2": (_desc("tres_per_job", "gres:gpu:a100:2"), 2, 1),
    "-n 4 --gpus-per-task=2": (_desc("tres_per_task", "gres:gpu:2", tasks=4), 8, 1),
    "-N 2 -n 4 --gpus-per-task=1": (_desc("tres_per_task", "gres:gpu:1", nodes=2, tasks=4), 4, 2),
    "-N 2 --gpus-per-task=1": (_desc("tres_per_task", "gres:gpu:1", nodes=2, tasks=2), 2, 2),
    "--gpus-per-task=2": (_desc("tres_per_task", "gres:gpu:2"), 2, 1),
    "-N 2 --gpus-per-node=2": (_desc("tres_per_node", "gres:gpu:2", nodes=2), 4, 2),
}


def _served(job_desc: dict[str, Any]) -> Any:
    base = {"user_name": "alice", "user_id": 1000, "name": "train", "partition": "gpu", "time_limit": 60,
            "min_cpus": 1, "cpus_per_task": NO_VAL16, "num_tasks": NO_VAL}  # fmt: skip
    payload = json.dumps({"job_desc": base | job_desc, "submit_uid": 1000})
    proc = subprocess.run(
        [LUA, str(REPO / "tests" / "lua" / "pb_tool.lua"), "build"],
        input=payload, capture_output=True, text=True, timeout=60, cwd=REPO, check=True,
    )  # fmt: skip
    message = pb.SubmitRequest.FromString(bytes.fromhex(json.loads(proc.stdout)["hex"]))
    return vectorize([request_from_proto(message)])[0]


def _trained(gpus: int, nodes: int) -> Any:
    line = (
        f"7|7|alice|gpu|COMPLETED|3000|60|1|{nodes}|{nodes}|billing=1,cpu=1,gres/gpu={gpus},mem=1G,node={nodes}"
        "|2024-03-01T10:00:00|2024-03-01T10:00:00|2024-03-01T10:50:00"
    )
    (record,) = read_sacct([HEADER, line])
    return vectorize([record.request])[0]


@pytest.mark.parametrize("submitted", CASES)
def test_a_gpu_job_is_served_with_the_gpus_per_node_it_was_trained_with(submitted: str) -> None:
    """Before, the plugin read only tres_per_node: a --gpus or --gpus-per-task job was served as a
    job of no GPUs (0.0) while training, from ReqTRES, gave it its GPUs (in rewrite mode the audit's
    --gpus=4 job was cut to 22 minutes where jobs like it ran 40-55)."""
    job_desc, gpus, nodes = CASES[submitted]
    served, trained = _served(job_desc), _trained(gpus, nodes)
    assert served[GPUS] == trained[GPUS] > 0
    assert served[NODES] == trained[NODES]
