"""`harp advise --script` reads a script's #SBATCH lines as a real sbatch (Slurm 22.05) submits them:
comments after the options, a `#` in a word, an apostrophe in a comment, a heterogeneous job (its
first component), the QOS, a script without -J (named after its file), sbatch's SBATCH_* variables
over a script, short options sharing a word, the words sbatch refuses, and the tasks and nodes sbatch
counts. Each script is submitted held, and what slurmctld holds (`scontrol show job`) is compared with
the request harp builds; last, the --time-min rule the advice's limits keep to."""

from __future__ import annotations

import re
import subprocess

import pytest

from slurm_harp.advice.sbatch_directives import ENVIRONMENT
from slurm_harp.cli import build_parser
from slurm_harp.commands.advise import build_request
from tests.e2e.advice_site import held_record
from tests.e2e.client_output import parse_scontrol_record
from tests.e2e.cluster import SlurmCluster

pytestmark = pytest.mark.e2e

SCRIPTS = {
    # No -J: sbatch names the job after the file. Each comment names what would be refused or
    # differ if it were read (no QOS nosuch, 64 tasks on a node of fewer CPUs).
    "relax-e2e.sbatch": "#!/bin/sh\n"
    "#SBATCH -p debug        # the other partition: -p batch\n"
    "#SBATCH --ntasks=1      # big meshes need --ntasks=64\n"
    "#SBATCH -q normal       # don't: -q nosuch\n"
    "sleep 1\n",
    # sbatch ends a line's options at a `#` even inside a word: the job is named "relax", and
    # anything after it on that line is not read.
    "het-e2e.sbatch": "#!/bin/sh\n#SBATCH -J relax#2 -p batch\n#SBATCH -p debug -n 1\n#SBATCH hetjob\n"
    "#SBATCH -p batch -n 1\nsleep 1\n",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_harp_advise_reads_a_script_as_sbatch_submits_it(slurm_cluster: SlurmCluster, name: str) -> None:
    path = slurm_cluster.jobs_dir / name
    path.write_text(SCRIPTS[name])
    done = slurm_cluster.run(["sbatch", "--parsable", "--hold", "-o", "/dev/null", str(path)])
    assert done.returncode == 0, done.stderr
    job_id = int(re.match(r"\d+", done.stdout.strip()).group())  # type: ignore[union-attr]
    try:
        shown = slurm_cluster.run(["scontrol", "show", "job", str(job_id)])
        assert shown.returncode == 0, shown.stderr
        first = parse_scontrol_record(shown.stdout.strip().split("\n\n")[0])  # a hetjob's component 0
    finally:
        slurm_cluster.run(["scancel", str(job_id)])
    job = build_request(build_parser().parse_args(["advise", "--script", str(path)])).job
    assert (job.job_name, job.partition, job.num_tasks) == (first["JobName"], first["Partition"], 1)
    assert first["NumTasks"] == "1" and job.partition == "debug"
    if name == "relax-e2e.sbatch":
        assert job.job_name == name and job.qos == first["QOS"] == "normal"
    else:
        assert job.job_name == "relax" and not job.HasField("qos")


# (script lines, sbatch's input variables, what slurmctld holds, whether harp prices whole nodes)
ENVIRONMENTS = [
    (
        "#SBATCH -p debug -t 5 -J a\n",
        {"SBATCH_PARTITION": "batch", "SBATCH_TIMELIMIT": "7", "SBATCH_JOB_NAME": "b"},
        {"Partition": "batch", "TimeLimit": "00:07:00", "JobName": "b"},
        False,
    ),
    # One memory option in the script wins over another's variable; the same one's variable wins.
    ("#SBATCH --mem-per-cpu=50\n", {"SBATCH_MEM_PER_NODE": "200"}, {"MinMemoryCPU": "50M"}, False),
    ("#SBATCH --mem=100\n", {"SBATCH_MEM_PER_NODE": "200"}, {"MinMemoryNode": "200M"}, False),
    ("#SBATCH --exclusive\n", {"SBATCH_EXCLUSIVE": "user"}, {"OverSubscribe": "USER"}, False),
    ("#SBATCH -s\n", {"SBATCH_EXCLUSIVE": ""}, {"OverSubscribe": "NO"}, True),
]


def _submit_with(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, lines: str, environ: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """sbatch of a script of ``lines`` with ``environ`` (held), and `harp advise`'s arguments for it,
    this process's SBATCH_* variables then being ``environ`` alone."""
    path = slurm_cluster.jobs_dir / "environment-e2e.sbatch"
    path.write_text("#!/bin/sh\n" + lines + "sleep 1\n")
    done = slurm_cluster.run(
        ["sbatch", "--parsable", "--hold", "-o", "/dev/null", str(path)], env={**slurm_cluster.env, **environ}
    )
    for variable in ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environ.items():
        monkeypatch.setenv(variable, value)
    return done, ["advise", "--script", str(path)]


@pytest.mark.parametrize(("lines", "environ", "held", "exclusive"), ENVIRONMENTS)
def test_harp_advise_reads_sbatch_s_environment_as_sbatch_does(
    slurm_cluster: SlurmCluster,
    monkeypatch: pytest.MonkeyPatch,
    lines: str,
    environ: dict[str, str],
    held: dict[str, str],
    exclusive: bool,
) -> None:
    done, argv = _submit_with(slurm_cluster, monkeypatch, lines, environ)
    record = held_record(slurm_cluster, done)
    assert {key: record.get(key) for key in held} == held
    request = build_request(build_parser().parse_args(argv))
    job = request.job
    for key, value in held.items():
        if key == "MinMemoryCPU":
            assert (job.mem_per_cpu_mb, job.HasField("mem_per_node_mb")) == (int(value[:-1]), False)
        elif key == "MinMemoryNode":
            assert (job.mem_per_node_mb, job.HasField("mem_per_cpu_mb")) == (int(value[:-1]), False)
        elif key == "TimeLimit":
            assert job.time_limit_minutes == 7
        elif key != "OverSubscribe":
            assert getattr(job, {"Partition": "partition", "JobName": "job_name"}[key]) == value
    assert request.exclusive is exclusive


@pytest.mark.parametrize(
    ("lines", "environ", "refused"),
    [
        ("#SBATCH --mem=100 --mem-per-cpu=50\n", {}, "sbatch takes one of --mem, --mem-per-cpu"),
        (
            "",
            {"SBATCH_MEM_PER_CPU": "30", "SBATCH_MEM_PER_NODE": "200"},
            "sbatch takes one of these variables",
        ),
        ("#SBATCH -t 5\n", {"SBATCH_TIMELIMIT": "bogus"}, "SBATCH_TIMELIMIT=bogus: time limit"),
    ],
)
def test_what_sbatch_refuses_harp_advise_refuses(
    slurm_cluster: SlurmCluster,
    monkeypatch: pytest.MonkeyPatch,
    lines: str,
    environ: dict[str, str],
    refused: str,
) -> None:
    done, argv = _submit_with(slurm_cluster, monkeypatch, lines, environ)
    assert done.returncode != 0 and "sbatch: " in done.stderr, done.stdout
    with pytest.raises(ValueError, match=refused):
        build_request(build_parser().parse_args(argv))


# (script lines, the job's tasks as slurmctld holds them): getopt's short options.
SHORT_OPTIONS = [
    ("#SBATCH -Hn2 -p debug\n", 2),  # -H takes no value: -n2 is read
    ("#SBATCH -vvn2 -p debug\n", 2),
    ("#SBATCH -p debug -e -n3.log\n", 1),  # -e's value, whatever it looks like
    ("#SBATCH -p debug -Qe x.log -n 2 --\n", 2),
]


@pytest.mark.parametrize(("lines", "tasks"), SHORT_OPTIONS)
def test_harp_advise_reads_short_options_as_sbatch_does(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, lines: str, tasks: int
) -> None:
    done, argv = _submit_with(slurm_cluster, monkeypatch, lines, {})
    assert held_record(slurm_cluster, done)["NumTasks"] == str(tasks)
    job = build_request(build_parser().parse_args(argv)).job
    assert (job.num_tasks or 1, job.partition) == (tasks, "debug")


# (script lines, the job's tasks and nodes as slurmctld holds them): sbatch's _opt_verify counts them.
LAYOUTS = [
    ("#SBATCH -p debug -N 1 -B 1:2\n", 2, "1-1"),  # a task per core asked
    ("#SBATCH -p debug -B '*:2'\n", 2, "1"),  # -B alone: one node's
    ("#SBATCH -p debug -N 1 --cores-per-socket=2 --threads-per-core=1\n", 2, "1-1"),
    ("#SBATCH -p debug -N 2 -n 1\n", 1, "1-1"),  # "can't run 1 processes on 2 nodes"
    ("#SBATCH -p debug -N 1-2 -B 1:2\n", 1, "1-2"),  # a range: a task a node, no more
]


@pytest.mark.parametrize(("lines", "tasks", "nodes"), LAYOUTS)
def test_harp_advise_counts_tasks_and_nodes_as_sbatch_does(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, lines: str, tasks: int, nodes: str
) -> None:
    """Before, -B, --cores-per-socket and --threads-per-core were not read (one task), and -N 2 -n 1
    was priced on two nodes."""
    done, argv = _submit_with(slurm_cluster, monkeypatch, lines, {})
    held = held_record(slurm_cluster, done)
    assert (held["NumTasks"], held["NumNodes"]) == (str(tasks), nodes)
    job = build_request(build_parser().parse_args(argv)).job
    assert (job.num_tasks or 1, job.min_nodes or 1) == (tasks, int(nodes.split("-")[0]))


@pytest.mark.parametrize(
    ("lines", "refused"),
    [
        ("#SBATCH -p debug stray -n 2\n", "Invalid directive found in batch script: stray"),
        ("#SBATCH -p debug --exclusive user\n", "Invalid directive found in batch script: user"),
        ("#SBATCH -p debug -J a\\ b\n", "Invalid directive found in batch script: b"),
        ("#SBATCH -p debug -- -n 2\n", "Invalid directive found in batch script: -n"),
        ("#SBATCH -p debug -Z\n", "invalid option -- 'Z'"),
    ],
)
def test_a_word_sbatch_refuses_harp_advise_refuses(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, lines: str, refused: str
) -> None:
    """sbatch's getopt stops at a word that is no option, and sbatch refuses the script; so does
    harp advise, naming the line (before, it passed over such words and advised the job)."""
    done, argv = _submit_with(slurm_cluster, monkeypatch, lines, {})
    assert done.returncode != 0 and refused in done.stderr, (done.stdout, done.stderr)
    with pytest.raises(ValueError, match=r"script line 2: .*(is no option|invalid option)"):
        build_request(build_parser().parse_args(argv))


def test_slurmctld_refuses_a_limit_below_time_min(slurm_cluster: SlurmCluster) -> None:
    """What the advice's floor rests on (advice/option.py): slurmctld 22.05 refuses a job whose
    --time-min is above its time limit (ESLURM_INVALID_TIME_MIN_LIMIT), and takes one at it."""
    argv = ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "-p", "debug", "--time-min=90"]
    refused = slurm_cluster.run([*argv, "-t", "33", "--wrap", "true"])
    assert refused.returncode != 0 and "Invalid time-min specification" in refused.stderr, refused.stderr
    held = held_record(slurm_cluster, slurm_cluster.run([*argv, "-t", "90", "--wrap", "true"]))
    assert (held["TimeMin"], held["TimeLimit"]) == ("01:30:00", "01:30:00")
