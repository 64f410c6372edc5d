"""advice.script and advice.partition_shape: a batch script's header and scontrol's partitions."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.advice.gpu_memory import TrainingFacts
from slurm_harp.advice.partition_shape import PartitionShape, shapes_from_scontrol
from slurm_harp.advice.script import facts_from_comment, parse_script, script_signature
from slurm_harp.core.request import JobRequest
from tests.unit.test_lua_plugin import SIGNED_SCRIPTS, _signature

SCRIPT = """#!/bin/bash
#SBATCH -J relax --partition=batch,long
#SBATCH -n 4 -c2
#SBATCH --time=1-02:00:00
#SBATCH --mem=8G          # trailing words are not options
#SBATCH --comment "harp-params=7.5e9 harp-zero=2 other=x"
# a comment
#SBATCH --nodes 2-4
srun ./relax
#SBATCH --mem=1   (after the first command: not read, as in sbatch)
"""


def test_the_header_as_sbatch_reads_it() -> None:
    job = parse_script(SCRIPT, cwd="/home/ann")
    assert job.request == JobRequest(
        job_name="relax",
        work_dir="/home/ann",  # no -D: where sbatch runs
        partition="batch",
        script_signature=script_signature(SCRIPT),
        time_limit_minutes=26 * 60,
        mem_per_node_mb=8192,
        min_cpus=8,
        cpus_per_task=2,
        num_tasks=4,
        min_nodes=2,
    )
    assert job.training == TrainingFacts(parameters=7.5e9, stage=2)


@pytest.mark.parametrize(
    ("lines", "fields"),
    [
        ("#SBATCH --gres=gpu:a100:2\n", {"gpus_per_node": 2}),
        ("#SBATCH --gres=gpu:2,license:x:1\n", {"gpus_per_node": 2}),
        # -N without -n: a task per node, as Slurm runs it
        ("#SBATCH -N 2 --gpus=a100:6\n", {"gpus_per_node": 3, "min_nodes": 2, "num_tasks": 2, "min_cpus": 2}),
        ("#SBATCH -N 3 -c 4\n", {"min_nodes": 3, "num_tasks": 3, "cpus_per_task": 4, "min_cpus": 12}),
        ("#SBATCH --gpus-per-node=4 --mem-per-cpu=2000\n", {"gpus_per_node": 4, "mem_per_cpu_mb": 2000}),
        ("#SBATCH --ntasks-per-node=8 -N 2\n", {"num_tasks": 16, "min_cpus": 16, "min_nodes": 2}),
        ("#SBATCH -t 90 -A phys\n", {"time_limit_minutes": 90, "account": "phys"}),
        # The QOS: a partition's AllowQos / DenyQos admit by it (in lower case, as Slurm keeps it).
        ("#SBATCH -q debug\n", {"qos": "debug"}),
        ("#SBATCH --qos=Long\n", {"qos": "long"}),
        ("#SBATCH --exclusive --mail-type=ALL\n", {}),
        # As sbatch reads them: a GPU type without a count is one GPU; a B after a memory unit
        # (str_to_mbytes), K rounded up to a MB; a short option's value is the rest of its word.
        ("#SBATCH --gres=gpu:a100,gpu:v100:2,gpu\n", {"gpus_per_node": 4}),
        ("#SBATCH --gpus-per-node=a100\n", {"gpus_per_node": 1}),
        ("#SBATCH --mem=4GB\n", {"mem_per_node_mb": 4096}),
        ("#SBATCH --mem-per-cpu=1025k\n", {"mem_per_cpu_mb": 2}),
        ("#SBATCH --mem=2tb\n", {"mem_per_node_mb": 2 * 1024**2}),
        ("#SBATCH -J=foo\n", {"job_name": "=foo"}),
        # sbatch's getopt_long: a prefix only one of sbatch's options begins with is that option, a
        # name given whole is itself (--mem, not --mem-per-cpu); --tasks-per-node is --ntasks-per-node;
        # the value of an option the advice does not read is not read as an option.
        (
            "#SBATCH --part=batch --job x --mem-per-c=100 --gpus-per-n=2\n",
            {"partition": "batch", "job_name": "x", "mem_per_cpu_mb": 100, "gpus_per_node": 2},
        ),
        (
            "#SBATCH --tasks=4 -N 2 --mem 1\n",
            {"num_tasks": 8, "min_cpus": 8, "min_nodes": 2, "mem_per_node_mb": 1},
        ),
        ("#SBATCH -J real --output -Jx.log --exclusive\n", {"job_name": "real"}),
        # Short options share a word, as getopt reads them: -H and -v take no value, so -n is read
        # (before, -Hn2 was one option the advice did not read: a job of one task).
        ("#SBATCH -Hn2\n", {"num_tasks": 2, "min_cpus": 2}),
        ("#SBATCH -vvn2 -sN3\n", {"num_tasks": 2, "min_cpus": 2, "min_nodes": 2}),  # -n 2 < -N 3: 2 nodes
        ("#SBATCH -Qo x.log -n 2\n", {"num_tasks": 2, "min_cpus": 2}),
        # A short option's value is the next word whatever it looks like: the output file "-n3.log",
        # then "-n2", the error file (before, both were read as -n: refused, and 2 tasks).
        ("#SBATCH -o -n3.log -J x\n", {"job_name": "x"}),
        ("#SBATCH -J x -e\n#SBATCH -n2\n", {"job_name": "x"}),
        # -N or -B without -n: sbatch (_opt_verify) sends a task per node, times the sockets, cores and
        # threads per node asked where the node count is no range; -n below -N lowers the nodes.
        ("#SBATCH -N 2 -B 2:4:1\n", {"num_tasks": 16, "min_cpus": 16, "min_nodes": 2}),
        ("#SBATCH -B '*:2-4'\n", {"num_tasks": 2, "min_cpus": 2}),
        ("#SBATCH -B 2 --cores-per-socket=3 -N 1\n", {"num_tasks": 6, "min_cpus": 6, "min_nodes": 1}),
        ("#SBATCH -N 2-4 --threads-per-core=2\n", {"num_tasks": 2, "min_cpus": 2, "min_nodes": 2}),
        ("#SBATCH --cores-per-socket=2\n", {}),  # no -N nor -B: one task
        ("#SBATCH -N 3 -n 2 -c 2\n", {"num_tasks": 2, "min_cpus": 4, "cpus_per_task": 2, "min_nodes": 2}),
        # What the models read besides the size: --time-min, an array, the directory (as the hook sends).
        (
            "#SBATCH --time-min=1:30:00 --array=1-10 -D /scratch/run\n",
            {"time_min_minutes": 90, "is_array": True, "work_dir": "/scratch/run"},
        ),
        # "--" ends the options: as the last word, nothing after it to refuse.
        ("#SBATCH -n2 --\n", {"num_tasks": 2, "min_cpus": 2}),
        # An option stock sbatch does not know is a SPANK plugin's: the word after it, if no option,
        # may be its value.
        (
            "#SBATCH --site-opt value -n 2 --site-flag -J x\n",
            {"num_tasks": 2, "min_cpus": 2, "job_name": "x"},
        ),
    ],
)
def test_directives(lines: str, fields: dict[str, object]) -> None:
    script = "#!/bin/sh\n" + lines
    fields = {"work_dir": "/home/ann"} | fields  # no -D: where sbatch runs
    want = JobRequest(script_signature=script_signature(script), **fields)  # type: ignore[arg-type]
    assert parse_script(script, cwd="/home/ann").request == want


def test_a_relative_directory_is_the_submitter_s_as_sbatch_makes_it() -> None:
    """sbatch's -D (arg_set_chdir): a relative one under the directory sbatch runs in, not normalised."""
    job = parse_script("#!/bin/sh\n#SBATCH -D run/../x\n", cwd="/home/ann")
    assert job.request.work_dir == "/home/ann/run/../x"


def test_without_d_the_directory_is_the_submitter_s_as_sbatch_sends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch sends the directory it runs in as the job's WorkDir when no -D is given (arg_reset_chdir),
    and the models read it (hash_work_dir): before, a script without -D was advised as a job of no
    directory, where the hook and the job_submit plugin send one
    (tests/e2e/test_cli_filter_options_e2e.py)."""
    assert parse_script("#!/bin/sh\n#SBATCH -n 2\n", cwd="/home/ann").request.work_dir == "/home/ann"
    monkeypatch.chdir(tmp_path)  # harp advise --script: the directory it runs in
    assert parse_script("#!/bin/sh\n").request.work_dir == str(tmp_path)


@pytest.mark.parametrize(
    ("lines", "gpus"),
    [
        # --gpus-per-task: x the tasks sbatch sends (-n, else --ntasks-per-node x nodes, else with -N or
        # -B nodes x the sockets, cores and threads asked), else, where -N pins the node count, a task
        # a node (none with -c), else x 1 (gpus.lua's rule; sbatch 22.05 then refuses the job:
        # "--gpus-per-task used without either --gpus or -n/--ntasks", as the test cluster's did; the
        # advice still counts it so)
        ("-n 4 --gpus-per-task=1", 4),
        ("-N 2 --ntasks-per-node=2 --gpus-per-task=1", 2),
        ("--ntasks-per-node=3 --gpus-per-task=1", 3),
        ("--gpus-per-task=a100:2 -n 2", 4),
        ("--gpus-per-t=2 -n 3", 6),  # a prefix only --gpus-per-task begins
        ("--gpus-per-task=1", 1),  # no -n: one task (sbatch refuses it)
        ("-N 2 --gpus-per-task=1", 1),  # a task a node: 2 GPUs over 2 nodes
        ("-N 2 -n 8 --gpus-per-task=1", 4),
        ("-N 2 -c 4 --gpus-per-task=2", 1),  # -c without -n: one task, 2 GPUs over 2 nodes (refused)
        ("-N 2-4 --ntasks-per-node=2 --gpus-per-task=1", 1),  # a range: no tasks counted, one (refused)
        ("-N 2 --sockets-per-node=2 --gpus-per-task=1", 2),  # sbatch: a task a socket
        ("-N 2 --cores-per-socket=2 --gpus-per-task=1", 2),  # and a core (accounted so: test_gpus_e2e)
        ("-N 1 -B 1:2 --gpus-per-task=1", 2),
        ("-B 1:2 --gpus-per-task=1", 2),  # -B alone: one node
        ("--cores-per-socket=2 --gpus-per-task=1", 1),  # neither -N nor -B: no tasks sent
        ("-N 2-4 --cores-per-socket=2 --gpus-per-task=1", 1),  # a range: none either
        # --gpus-per-socket: x nodes x sockets per node, else x ceil(tasks / tasks per socket), else x 1
        ("--gpus-per-socket=1 -N 1 --sockets-per-node=2", 2),
        ("--gpus-per-socket=1 -N 2 --sockets-per-node=2", 2),
        ("--gpus-per-socket=1 --sockets-per-node=2", 2),
        ("--gpus-per-socket=1 -N 2 -B 2:1", 2),  # -B's sockets: the same field
        ("-n 5 --ntasks-per-socket=2 --gpus-per-socket=1", 3),
        ("--gpus-per-socket=2", 2),
        # --ntasks-per-gpu (--ntasks-per-tres) without a GPU ask: tasks / that many; with one: the ask
        ("-n 8 --ntasks-per-gpu=2", 4),
        ("-N 2 --ntasks-per-gpu=2", 1),
        ("-n 8 --ntasks-per-tres=4", 2),
        ("-n 8 --ntasks-per-gpu=2 --gpus=1", 1),
        ("--ntasks-per-gpu=2", None),  # no tasks to count by: no GPUs
        # Asked two ways: per GPU type the largest, the types added up
        ("-N 2 --gpus=4 --gpus-per-node=1", 2),
        ("-N 2 --gpus=2 --gpus-per-node=3", 3),
        ("-n 6 --gpus=2 --gpus-per-task=1", 6),
        ("-n 3 --gres=gpu:a100:1 --gpus-per-task=a100:1", 3),
        ("-n 2 --gpus=v100:1 --gpus-per-task=a100:1", 3),
        ("--gpus=2,2", 2),  # one type twice: the larger, as slurmctld keeps one record a type
    ],
)
def test_gpus_are_counted_as_accounting_counts_them(lines: str, gpus: int | None) -> None:
    """GPUs per node by plugin/harp/gpus.lua's rule (slurmctld 22.05's gres_job_state_validate, what
    ReqTRES records, over ReqNodes as training reads it). Before, --gpus-per-task, --gpus-per-socket
    and --ntasks-per-gpu were not read: `-n 4 --gpus-per-task=1` was advised as a job of no GPUs."""
    assert parse_script(f"#!/bin/sh\n#SBATCH {lines}\n").request.gpus_per_node == gpus


@pytest.mark.parametrize(
    ("lines", "exclusive"),
    [
        ("#SBATCH --exclusive\n", True),
        ("#SBATCH -J x --exclusive -n 1\n", True),
        ("#SBATCH --exclusive=exclusive\n", True),
        ("#SBATCH --exclusive=EXCLUSIVE\n", True),  # any case (xstrcasecmp)
        ("#SBATCH --exclus\n", True),  # a prefix only --exclusive begins (not --exclude)
        ("#SBATCH --exclusive=user\n", False),  # nodes to one user's jobs, each as it asks
        ("#SBATCH --exclusive=mcs\n", False),
        ("#SBATCH --exclusive=oversubscribe\n", False),
        # --oversubscribe (-s) sets the same field: the last of them wins, as in sbatch
        ("#SBATCH --exclusive\n#SBATCH --oversubscribe\n", False),
        ("#SBATCH --exclusive -s\n", False),
        ("#SBATCH -s\n#SBATCH --exclusive\n", True),
        ("#SBATCH --exclusive=user --exclusive\n", True),
        ("#SBATCH -n 1\n", False),
        ("#SBATCH --exclusive\nsrun ./x\n#SBATCH -s\n", True),  # after the first command: not read
    ],
)
def test_exclusive_as_sbatch_reads_it(lines: str, exclusive: bool) -> None:
    """sbatch 22.05 (slurm_opt.c arg_set_exclusive): a bare --exclusive or =exclusive gives the job
    whole nodes; =user and =mcs share them among one user's (label's) jobs. Before, not read."""
    assert parse_script("#!/bin/sh\n" + lines).exclusive is exclusive


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ("#SBATCH -n zero\n", "--ntasks=zero: expected a whole number"),
        # sbatch refuses them: "Invalid --exclusive specification"
        ("#SBATCH --exclusive=node\n", "line 2: --exclusive=node: expected no value, or =exclusive"),
        ("#SBATCH --exclusive=\n", "line 2: --exclusive=: expected no value"),
        ("#SBATCH --time=1:2:3:4\n", "time limit"),
        ("#SBATCH --mem=lots\n", "--mem=lots: expected a whole amount"),
        # sbatch refuses these (str_to_mbytes: whole numbers, K to T): so does the advice
        ("#SBATCH --mem=1.5G\n", "--mem=1.5G: expected a whole amount such as 4000, 4000M, 4G or 4GB"),
        ("#SBATCH --mem=4P\n", "--mem=4P: expected a whole amount"),
        ("#SBATCH --mem=4GBB\n", "--mem=4GBB: expected a whole amount"),
        ("#SBATCH -n=4\n", "--ntasks==4: expected a whole number"),  # getopt: "=4", which sbatch refuses
        ("#SBATCH --gres=gpu:a100:x\n", "--gres=gpu:a100:x: expected a whole number"),
        ("#SBATCH -n 2 --gpus-per-task=a100:x\n", "--gpus-per-task=a100:x: expected a whole number"),
        ("#SBATCH --gpus-per-socket=0\n", "--gpus-per-socket=0: expected a whole number >= 1"),
        ("#SBATCH -J\n", "--job-name without a value"),
        # sbatch 22.05 (_validate_memory_options): "--mem, --mem-per-cpu, and --mem-per-gpu are
        # mutually exclusive". Before, both were read.
        (
            "#SBATCH --mem=4GB\n#SBATCH --mem-per-cpu=1025k\n",
            "lines 2, 3: --mem=4GB --mem-per-cpu=1025k: sbatch takes one of --mem, --mem-per-cpu and --mem-",
        ),
        ("#SBATCH --mem-per-gpu=1G --mem=1G\n", "--mem=1G --mem-per-gpu=1G: sbatch takes one of"),
        # a prefix several of sbatch's options begin with: sbatch refuses it (getopt_long)
        (
            "#SBATCH --gpus-per=2\n",
            "script line 2: option '--gpus-per' is ambiguous; possibilities: "
            "'--gpus-per-node' '--gpus-per-socket' '--gpus-per-task'",
        ),
        (
            "#SBATCH -J x\n#SBATCH --ti=10\n",
            "script line 3: option '--ti' is ambiguous; possibilities: '--time' '--time-min'",
        ),
        ("#SBATCH --par=batch\n", "possibilities: '--parsable' '--partition'"),
        ('#SBATCH -J "open\n', 'script line 2: unmatched " \\(sbatch refuses it\\)'),
        ("#SBATCH -J x\n#SBATCH -A 'open # a quote in a word, before the #\n", "script line 3: unmatched '"),
        ("#SBATCH -J :x\n", "script line 2: a word begins with ':' \\(sbatch refuses it\\)"),
        # getopt stops at the first word that is no option, and sbatch refuses the script: "Invalid
        # directive found in batch script: stray". Before, the advice passed over such words.
        ("#SBATCH -p debug stray -n 2\n", "script line 2: 'stray' is no option: sbatch refuses the script"),
        ("#SBATCH --exclusive user\n", "'user' is no option"),  # optional_argument: a value only after =
        ("#SBATCH -J a\\ b\n", "'b' is no option"),  # Slurm 22.05: "\ " is no space (24.05 made it one)
        ("#SBATCH -n 2\n#SBATCH -\n", "script line 3: '-' is no option"),
        ("#SBATCH -- -n 2\n", "'-n' is no option"),
        ("#SBATCH -J " + "x" * 100 + " " + "y" * 5000 + "\n", "'y{40}\\.\\.\\.' is no option"),
        # getopt: "invalid option -- 'Z'", which sbatch refuses (-I is srun's and salloc's)
        ("#SBATCH -n 2 -Z\n", "script line 2: invalid option -- 'Z' \\(sbatch refuses it\\)"),
        ("#SBATCH -HI\n", "invalid option -- 'I'"),
        ("#SBATCH -J x\n#SBATCH -o\n", "script line 3: --output without a value"),
        ("#SBATCH -B 2:x\n", "line 2: --extra-node-info=2:x: expected a whole number"),
        ("#SBATCH -N 1 --threads-per-core=0\n", "--threads-per-core=0: expected a whole number >= 1"),
    ],
)
def test_bad_directives_are_named(lines: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_script("#!/bin/sh\n" + lines)


MORE = "more than Slurm allows"


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (
            "#SBATCH --cpus-per-task=99999999999999999999\n",
            rf"line 2: --cpus-per-task=9+: {MORE} \(at most 65533\)",
        ),
        ("#SBATCH -J x\n#SBATCH --nodes=99999999999999999999\n", f"line 3: --nodes=9+: {MORE}"),
        ("#SBATCH -N " + "9" * 5000 + "\n", rf"line 2: --nodes=9{{40}}\.\.\.: {MORE}"),
        ("#SBATCH --nodes=1e400\n", "line 2: --nodes=1e400: expected a whole number"),
        ("#SBATCH --ntasks=\u0661\n", "line 2: --ntasks=\u0661: expected a whole number"),
        ("#SBATCH --gres=gpu:99999999999999999999999\n", f"line 2: --gres=gpu:9+: {MORE}"),
        (
            "#SBATCH --gpus=a100:4294967293,v100:1\n",
            f"line 2: --gpus=a100:4294967293,v100:1: 4294967294 GPUs: {MORE}",
        ),
        (
            "#SBATCH --gpus-per-task=100000 -n 4294967293\n",
            f"line 2: --gpus-per-task=100000 --ntasks=4294967293: 429496729300000 GPUs over 1 nodes: {MORE}",
        ),
        (
            "#SBATCH --ntasks-per-node=99999\n#SBATCH -N 99999\n",
            f"lines 2, 3: --ntasks-per-node=99999 --nodes=99999: 9999800001 tasks: {MORE}",
        ),
        (
            "#SBATCH -n 99999 -c 65533\n",
            f"line 2: --cpus-per-task=65533 --ntasks=99999: 6553234467 CPUs: {MORE}",
        ),
        (
            "#SBATCH --time=99999999999999999999\n",
            rf"line 2: --time=9+: {MORE} \(at most 4294967293 minutes\)",
        ),
        (
            "#SBATCH --mem=99999999999999999999999999T\n",
            rf"line 2: --mem=9+T: {MORE} \(at most 9007199254740991 MB\)",
        ),
        ("#SBATCH --mem-per-cpu=99999999999T\n", f"line 2: --mem-per-cpu=9+T: {MORE}"),
    ],
)
def test_counts_beyond_slurm_are_refused_naming_the_option_and_line(lines: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_script("#!/bin/sh\n" + lines)


@pytest.mark.parametrize("option", ["--time", "--mem", "--nodes", "--cpus-per-task"])
def test_a_long_value_is_quoted_cut_short(option: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_script(f"#!/bin/sh\n#SBATCH {option}={'x' * 20_000}\n")
    assert f"line 2: {option}={'x' * 40}...:" in str(caught.value) and len(str(caught.value)) < 300


@pytest.mark.parametrize(
    ("value", "quoted"), [("gpu:0", "--gres=gpu:0:"), ("gpu:a100:0(S:0)", "--gres=gpu:a100:0\\(S:0\\):")]
)
def test_a_bad_gres_is_quoted_as_written(value: str, quoted: str) -> None:
    with pytest.raises(ValueError, match=f"line 2: {quoted} expected a whole number >= 1"):
        parse_script(f"#!/bin/sh\n#SBATCH --gres={value}\n")


def test_names_not_utf8_are_read_by_the_one_text_rule() -> None:
    # The script as `harp advise` reads it: bytes kept (surrogateescape) for the signature.
    raw = b"#!/bin/sh\n#SBATCH -J r\xffx -A \xe0\x80 -p b\xfe,long\n"
    job = parse_script(raw.decode("utf-8", errors="surrogateescape")).request
    assert (job.job_name, job.account, job.partition) == ("r?x", "??", "b?")  # core.text


@pytest.mark.parametrize(
    ("lines", "fields"),
    [
        # An unquoted, unescaped # ends the line (sbatch's get_argument): the rest is a comment.
        (
            "#SBATCH -p short        # the long partition: -p long\n#SBATCH --ntasks=4   # or --ntasks=64\n",
            {"partition": "short", "num_tasks": 4, "min_cpus": 4},
        ),
        ("#SBATCH -J relax#2 -n 4\n", {"job_name": "relax"}),
        ("#SBATCH -J relax  # don't forget the mesh\n", {"job_name": "relax"}),
        # Quotes group words and keep a #; a backslash escapes the next character, in quotes too
        # (single ones as well), but not a space (Slurm 22.05; 24.05 made "\ " a space).
        ("#SBATCH -J \"relax #2\" -A 'a b'\n", {"job_name": "relax #2", "account": "a b"}),
        ("#SBATCH -J relax\\#2 -A 'it\\'s'\n", {"job_name": "relax#2", "account": "it's"}),
        # An empty word ends the line, and so does hetjob after the first word.
        ('#SBATCH -J x "" -n 4\n', {"job_name": "x"}),
        ("#SBATCH -J x hetjob -n 4\n", {"job_name": "x"}),
        # A heterogeneous job: its first component, the one the hook advises.
        (
            "#SBATCH -J relax -p cpu -n 4\n#SBATCH hetjob\n#SBATCH -p gpu -n 1 --gpus-per-node=2\n",
            {"job_name": "relax", "partition": "cpu", "num_tasks": 4, "min_cpus": 4},
        ),
        ("#SBATCH -n 2\n#SBATCH   PackJob\n#SBATCH -n 8\n", {"num_tasks": 2, "min_cpus": 2}),
        # #SLURM lines are sbatch's too (it warns); getopt reads all the lines' words as one list.
        ("#SLURM -J x\n#SBATCH -n\n#SBATCH 2\n", {"job_name": "x", "num_tasks": 2, "min_cpus": 2}),
    ],
)
def test_the_header_s_words_as_sbatch_splits_them(lines: str, fields: dict[str, object]) -> None:
    script = "#!/bin/sh\n" + lines + "srun ./relax\n"
    fields = {"work_dir": "/home/ann"} | fields  # no -D: where sbatch runs
    want = JobRequest(script_signature=script_signature(script), **fields)  # type: ignore[arg-type]
    assert parse_script(script, cwd="/home/ann").request == want


def test_training_facts_from_comment_tokens() -> None:
    assert facts_from_comment("nothing here") is None
    facts = facts_from_comment("harp-params=1e9,harp-precision=FP32 harp-optimizer=sgd harp-zero=3")
    assert facts == TrainingFacts(parameters=1e9, precision="fp32", optimizer="sgd", stage=3)
    with pytest.raises(ValueError, match="need harp-params"):
        facts_from_comment("harp-zero=2")
    with pytest.raises(ValueError, match="ZeRO stage 5"):
        facts_from_comment("harp-params=1e9 harp-zero=5")


@pytest.mark.parametrize("script", SIGNED_SCRIPTS)
def test_the_signature_is_the_plugins(script: str) -> None:
    """_signature is the plugin's Python twin."""

    assert script_signature(script) == _signature(script)


SCONTROL = """PartitionName=batch
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED
   Nodes=c[1-2]
   State=UP TotalCPUs=8 TotalNodes=2 SelectTypeParameters=NONE
   DefMemPerCPU=512 MaxMemPerNode=UNLIMITED
   TRES=cpu=8,mem=15880M,node=2,billing=8

PartitionName=gpu
   MaxNodes=2 MaxTime=2-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=32
   State=UP TotalCPUs=256 TotalNodes=4
   DefMemPerCPU=512 MaxMemPerNode=400G
   TRES=cpu=256,mem=2000G,node=4,billing=256,gres/gpu=16,gres/gpu:a100=16
"""


def test_partition_shapes_from_scontrol() -> None:
    shapes = shapes_from_scontrol(SCONTROL)
    assert shapes == shapes_from_scontrol(SCONTROL.replace("\n   ", " "))  # --oneliner too
    batch, gpu = shapes["batch"], shapes["gpu"]
    assert batch == PartitionShape("batch", nodes=2, cpus=8, mem_mb=15880.0)
    assert batch.cpus_per_node == 4 and batch.most_cpus == 8 and batch.mem_per_node_mb == 7940.0
    assert batch.nodes_for_cpus(5) == 2 and batch.nodes_for_cpus(9) is None and batch.most_gpus == 0
    # gpu: 64 CPUs a node but 32 a job per node; 2 nodes a job; 400 GB of a node's 500.
    assert gpu.cpus_per_node == 32 and gpu.most_cpus == 64 and gpu.gpus_per_node == 4
    assert gpu.most_gpus == 8 and gpu.nodes_for_gpus(5) == 2 and gpu.nodes_for_gpus(9) is None
    assert gpu.mem_per_node_mb == 400 * 1024 and gpu.max_minutes == 2880
    with pytest.raises(ValueError, match="scontrol partition batch: TotalCPUs: bad count 'many'"):
        shapes_from_scontrol(SCONTROL.replace("TotalCPUs=8", "TotalCPUs=many"))


def test_partition_counts_are_ascii_digits_and_a_no_val_total_does_not_read() -> None:
    """TotalCPUs and the other counts were read with str.isdigit(), which takes other scripts'
    digits: ``TotalCPUs=٤`` (Arabic-Indic four) read as 4 CPUs. Slurm prints ASCII digits, and its
    NO_VAL for a count it does not know: for a limit, none; a total does not read."""
    with pytest.raises(ValueError, match="scontrol partition batch: TotalCPUs: bad count"):
        shapes_from_scontrol(SCONTROL.replace("TotalCPUs=8", "TotalCPUs=\u0664"))
    with pytest.raises(ValueError, match="scontrol partition gpu: MaxNodes: bad count"):
        shapes_from_scontrol(SCONTROL.replace("MaxNodes=2", "MaxNodes=-2"))
    no_val = shapes_from_scontrol(SCONTROL.replace("MaxNodes=2", "MaxNodes=4294967294"))["gpu"]
    assert no_val.max_nodes is None and no_val.job_nodes == 4
    # A total Slurm does not know does not read (as 0 the advice said "has no CPUs for this job").
    with pytest.raises(ValueError, match="TotalCPUs: '4294967294': a total Slurm does not know"):
        shapes_from_scontrol(SCONTROL.replace("TotalCPUs=8", "TotalCPUs=4294967294"))
