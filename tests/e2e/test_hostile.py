"""Hostile submissions by an ordinary user, on a real cluster with our plugin and a real daemon.

The plugin runs inside a wrapper that logs the time slurm_job_submit took (monotonic clock), as
benchmarks/bench_plugin.py does. Partition debug is in rewrite mode; the daemon serves the bundled
trace's walltime model and a CPUs model trained on jobs that used half of the CPUs they asked for.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.core.tag import parse_tag
from slurm_harp.core.text import text_of_bytes
from slurm_harp.learning.family import FamilyConfig
from slurm_harp.learning.fitting import MethodConfig
from slurm_harp.learning.trainer import train_target
from slurm_harp.model.store import ModelStore
from tests.conftest import REPO
from tests.e2e.cluster import SlurmCluster, StartCluster
from tests.e2e.daemon_process import DaemonProcess, plugin_config, plugin_deadline
from tests.e2e.harvesting import accounted
from tests.integration.lua_driver import PLUGIN_ROOMY_MS

pytestmark = pytest.mark.alone  # times itself against the wall clock (scripts/test)

DEADLINE_MS = 50  # the production deadline, for the test about it; the others at PLUGIN_ROOMY_MS
WRAPPER = """
local clock = require("cqueues").monotime
dofile(debug.getinfo(1, "S").source:sub(2):match("^(.*)/") .. "/harp_entry.lua")
local inner = slurm_job_submit
function slurm_job_submit(job_desc, part_list, submit_uid)
  local t0 = clock()
  local rc = inner(job_desc, part_list, submit_uid)
  slurm.log_info("hostile plugin_us=%d", math.floor((clock() - t0) * 1e6 + 0.5))
  return rc
end
"""


def cpu_records(n: int = 1500) -> list[JobRecord]:
    """Jobs asking 2 CPUs (600 MB each) that kept one busy half of the time."""
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        run = int(rng.integers(60, 3600))
        submit = 1_700_000_000 + 600 * i
        request = JobRequest(
            user_name="nobody", partition="debug", time_limit_minutes=120, min_cpus=2, cpus_per_task=2,
            num_tasks=1, mem_per_cpu_mb=600, submit_time=submit,
        )  # fmt: skip
        out.append(
            JobRecord(
                job_id=str(i), request=request, state="COMPLETED", elapsed_s=run, start_time=submit,
                end_time=submit + run, total_cpu_s=0.5 * run, alloc_cpus=2,
            )
        )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def site(
    start_module_cluster: StartCluster, trained_store: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SlurmCluster, Path]]:
    work = Path(tempfile.mkdtemp(prefix="harp-hostile-"))
    work.chmod(0o755)
    store = work / "store"
    shutil.copytree(trained_store, store)
    config = MethodConfig(family=FamilyConfig(quantiles=(0.5, 0.9), compare=()))
    cpus = train_target(cpu_records(), Target.CPUS, config)
    ModelStore(store).publish(Target.CPUS, cpus.files, cpus.card)
    plugin_conf = plugin_config(work, deadline_ms=PLUGIN_ROOMY_MS, breaker_seconds=30)
    cluster = start_module_cluster(
        job_submit_lua=WRAPPER,
        extra_conf_files={
            "harp_plugin.lua": plugin_conf,
            "harp_entry.lua": (REPO / "plugin" / "job_submit.lua").read_text(),
        },
        public=True,
        slurm_conf_extra="SchedulerParameters=batch_sched_delay=0,max_script_size=33554432\n",
    )
    policy = (
        'limits = "quantile"\n[policy.floor]\ntime_minutes = 1\n'
        '[[policy.rule]]\npartition = "debug"\nmode = "rewrite"\n'
    )
    daemon = DaemonProcess(work, store, mode="shadow", extra=policy)
    daemon.start()
    try:
        yield cluster, work
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)


def submit_as_nobody(cluster: SlurmCluster, script: bytes, *options: str) -> tuple[int, str]:
    """(job id, sbatch's stderr) of ``script`` held, submitted by nobody with sbatch ``options``."""
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "sbatch", "--parsable", "-H", "-o", "/dev/null", *options],
        input=script, capture_output=True, cwd="/tmp", env=cluster.env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.decode().strip().split(";")[0]), done.stderr.decode(errors="replace")


def plugin_ms(cluster: SlurmCluster) -> float:
    return int(re.findall(r"hostile plugin_us=(\d+)", cluster.slurmctld_log())[-1]) / 1e3


def script(*directives: str, body: str = "sleep 1") -> bytes:
    return ("#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives) + body + "\n").encode()


def test_odd_names_are_served_and_do_not_switch_harp_off(site: tuple[SlurmCluster, Path]) -> None:
    cluster, _ = site
    names = [
        b"job-\xff\xfe-latin1-\xe9",
        ("é" * 150).encode(),
        b"ok-" + b"\xf0\x9f\x98",
        b"a" * 255 + "é".encode(),
        b"a" * 300,  # slurmdbd's TINYTEXT keeps 255 bytes: the cap on both sides
    ]
    jobs = {}
    for name in names:
        # Before the script's first command: sbatch reads no #SBATCH line after it.
        named = script("-t 120", "-p batch").replace(b"\n", b"\n#SBATCH -J " + name + b"\n", 1)
        job, _ = submit_as_nobody(cluster, named)
        shown = subprocess.run(
            ["scontrol", "show", "job", str(job)], capture_output=True, env=cluster.env, check=True
        )
        assert b" JobName=" + name + b"\n" in shown.stdout, shown.stdout  # the bytes as given
        assert b"harp:shadow" in shown.stdout, name
        jobs[job] = name
    # The breaker never opened: the next ordinary job is served too.
    job, _ = submit_as_nobody(cluster, script("-t 120", "-p batch", "-J plain"))
    assert "harp:shadow" in cluster.scontrol_show_job(job)["AdminComment"]
    assert "daemon call failed" not in cluster.slurmctld_log()
    # The name harvested is the name served (the plugin's Lua sends text_of_bytes(name): test_lua_text.py):
    # slurmdbd's MariaDB keeps each byte that is not UTF-8 as "?", the plugin's rule. (It also keeps as
    # "?" a character its tables' charset lacks, an emoji in latin1: that, only the site's database can fix.)
    for job, name in jobs.items():
        assert accounted(cluster, job).request.job_name == text_of_bytes(name), name


def test_a_latin1_database_keeps_other_characters_as_question_marks(site: tuple[SlurmCluster, Path]) -> None:
    """What docs/install.md says of slurmdbd's charset: this cluster's MariaDB runs with its built-in
    latin1 default, and a valid name outside Latin-1 is harvested with a "?" per character, unlike
    the name the plugin serves. Latin-1 characters are kept."""
    cluster, _ = site
    name = "名前-é-\U0001f642"
    job, _ = submit_as_nobody(cluster, script("-t 120", "-p batch", f"-J {name}"))
    assert cluster.scontrol_show_job(job)["JobName"] == name
    assert accounted(cluster, job).request.job_name == "??-é-?"


@pytest.mark.parametrize("name", [" spaced ", "None"])
def test_a_name_is_harvested_as_written(site: tuple[SlurmCluster, Path], name: str) -> None:
    """The plugin sends a job's name as written; sacct's reading stripped its edge spaces and took
    "None" for no name, so such jobs never met their own history."""
    cluster, _ = site
    job, _ = submit_as_nobody(cluster, script("-t 120", "-p batch"), f"--job-name={name}")
    assert accounted(cluster, job).request.job_name == name


def test_a_newline_in_a_job_name_forges_no_log_line(site: tuple[SlurmCluster, Path]) -> None:
    cluster, _ = site
    forged = "slurmctld: error: FORGED by a job name"
    # A name from the command line can hold a newline.
    submit_as_nobody(cluster, script("-t 3-00:00:00", "-p debug"), f"--job-name=a\n{forged}")
    lines = cluster.slurmctld_log().splitlines()
    assert not any(line.lstrip().startswith(forged) for line in lines)
    # The plugin logs the rewrite with the job's name, escaped, on one line.
    assert any("a\\nslurmctld: error: FORGED" in line for line in lines)


def test_a_10_mb_script_stays_within_the_deadline(site: tuple[SlurmCluster, Path]) -> None:
    cluster, work = site
    line = "#SBATCH --comment=" + "z" * 1000 + "\n"
    huge = script("-t 120", "-p debug") + (line * (10 * 1048576 // len(line))).encode() + b"sleep 1\n"
    assert len(huge) >= 10 * 1000 * 1000
    with plugin_deadline(cluster, work, DEADLINE_MS, breaker_seconds=30):
        job, _ = submit_as_nobody(cluster, huge)
    spent = plugin_ms(cluster)
    assert spent < DEADLINE_MS + 20, f"{spent:.1f} ms in slurm_job_submit"
    assert "harp:" in cluster.scontrol_show_job(job).get("AdminComment", "")


def test_a_cpu_cut_that_would_raise_mem_per_cpu_is_not_made(site: tuple[SlurmCluster, Path]) -> None:
    """One CPU would need 1200 MB per CPU to keep the 2 x 600 MB asked, and above MaxMemPerCPU Slurm
    turns more MB per CPU into more CPUs than asked: the CPUs model's cut to 1 is not made."""
    cluster, _ = site
    job, message = submit_as_nobody(cluster, script("-t 120", "-p debug", "-c 2", "--mem-per-cpu=600"))
    shown = cluster.scontrol_show_job(job)
    assert (shown["NumCPUs"], shown["MinMemoryCPU"]) == ("2", "600M"), shown  # as asked
    tag = parse_tag(shown["AdminComment"])
    assert tag is not None and tag.values["c"] == 1 and tag.flags["c"] == "" and tag.own["c"] == 2, tag
    assert "harp: lowered" not in message, message  # no cut announced that was not made
