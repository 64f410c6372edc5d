"""The sbatch hook's reading of sbatch's options, in a real sbatch (Slurm 22.05).

tests/unit/test_lua_advice.py holds the hook to `harp advise --script` on a table of sbatch's options
as pre_submit shows them (UNSET: what an option never given shows). Here a real sbatch on a "login
node" whose slurm.conf adds a recording cli_filter.lua submits each of that table's jobs as a script
(`--test-only`: nothing is queued); the recorder writes the options as sbatch showed them and the
AdviceRequest the hook builds from them (harp.sbatch_request, harp.pb). Shown: sbatch shows each
option as the table says, and the hook's request is the one `harp advise --script` builds from the
same file in the same directory, its script signature and directory included (before, a script
without -D was advised as a job of no directory, where sbatch sends the one it runs in).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.advice.script import parse_script
from slurm_harp.server.convert import request_from_proto
from tests.e2e.advice_site import hook_record, recording_hook
from tests.e2e.cluster import SlurmCluster
from tests.unit.test_lua_advice import SAME_JOB, UNSET

pytestmark = pytest.mark.e2e

SHOWN = sorted(set(UNSET) - {"type", "argv"} | {name for options, _ in SAME_JOB for name in options})
FIELDS = ("job_name", "partition", "account", "qos", "time_limit_minutes", "time_min_minutes",
          "mem_per_node_mb", "mem_per_cpu_mb", "min_cpus", "cpus_per_task", "num_tasks", "min_nodes",
          "gpus_per_node", "work_dir", "script_signature")  # fmt: skip


@pytest.fixture(scope="module")
def login(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return recording_hook(slurm_cluster, tmp_path_factory.mktemp("login"), SHOWN)


@pytest.mark.parametrize(("options", "directives"), SAME_JOB, ids=[d.replace("\n", " ") for _, d in SAME_JOB])
def test_the_hook_reads_a_real_sbatch_s_options_as_harp_advise_reads_the_script(
    slurm_cluster: SlurmCluster,
    login: dict[str, str],
    tmp_path: Path,
    options: dict[str, str],
    directives: str,
) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives.split("\n")) + "true\n")
    env = login | {"HARP_RECORD": str(tmp_path / "hook")}
    # sbatch may refuse the job after the hook (a partition this cluster lacks, GPUs it has none of)
    slurm_cluster.run(["sbatch", "--test-only", str(script)], env=env)
    shown, msg = hook_record(tmp_path / "hook")
    here = str(slurm_cluster.jobs_dir)  # where slurm_cluster.run runs sbatch
    expected = {name: value for name, value in (UNSET | {"chdir": here} | options).items() if name in SHOWN}
    assert {name: shown[name] for name in expected} == expected
    hook, advised = request_from_proto(msg.job), parse_script(script.read_text(), cwd=here).request
    assert {f: getattr(hook, f) for f in FIELDS} == {f: getattr(advised, f) for f in FIELDS}
    assert hook.script_signature is not None
    assert bool(hook.is_array) is bool(advised.is_array)
    assert msg.exclusive == parse_script(script.read_text()).exclusive
