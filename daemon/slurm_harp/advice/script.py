"""A batch script's ``#SBATCH`` header as the job request it submits, for ``harp advise --script``.

Read as sbatch reads it, with sbatch's ``SBATCH_*`` input variables over it
(advice.sbatch_directives): the job name, partition, account, QOS, tasks (with -N or -B and no -n, a
task per node times the sockets, cores and threads per node asked, as sbatch's _opt_verify counts
them), CPUs per task, nodes (lowered to -n's count, as sbatch does), tasks per node, time limit and
``--time-min``, whether it is an array, the directory (``-D``, else the one it is submitted from),
memory (per node or per CPU, as sbatch's str_to_mbytes reads it), GPUs (``--gpus``,
``--gpus-per-node``, ``--gres=gpu[:type][:N]``, ``--gpus-per-socket``, ``--gpus-per-task``,
``--ntasks-per-gpu``; a type without a count is one GPU; counted as accounting counts them, by
plugin/harp/gpus.lua's rule: ``_gpus_per_node``), the comment, and whether the job holds whole nodes
(``--exclusive``, which ``--oversubscribe`` or ``-s`` after it undoes: both set one field of
sbatch's). Other options are kept out of the request (they do not change what the advice compares).
The signature is the plugin's (plugin/README.md, "script_signature"), so a job's history can be
matched by its script as well as its name.

Training facts for the GPU-memory check may be given as comment tokens (docs/advice.md):
``#SBATCH --comment="harp-params=7.5e9 harp-zero=2 harp-precision=mixed harp-optimizer=adam"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from slurm_harp.advice.gpu_memory import TrainingFacts
from slurm_harp.advice.sbatch_directives import MAX_COUNT, MAX_CPUS_PER_TASK, Directives
from slurm_harp.core.request import JobRequest

__all__ = [
    "MAX_SCAN",
    "ScriptJob",
    "facts_from_comment",
    "parse_script",
    "script_signature",
]

# The plugin's bounds (plugin/harp/script_signature.lua): the signature of a script is the same here.
MAX_SCAN = 65536
MAX_SCAN_LINES = 1024
MAX_LINE = 1024
MAX_LINES = 256
MAX_HASHED = 2048
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

_FACT_TOKENS = {"harp-params": "parameters", "harp-zero": "stage", "harp-precision": "precision",
                "harp-optimizer": "optimizer"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScriptJob:
    request: JobRequest
    training: TrainingFacts | None = None  # from the comment's harp-* tokens
    exclusive: bool = False  # sbatch --exclusive: the job holds whole nodes


def script_signature(script: str) -> str | None:
    """Lower-case hex FNV-1a 64 of the script's ``#SBATCH`` lines, as the plugin computes it."""
    data = script.encode("utf-8", errors="surrogateescape")[: MAX_SCAN + 1]
    lines: list[bytes] = []
    pos = 0
    for seen, raw in enumerate(data.split(b"\n")):
        if pos >= MAX_SCAN or seen >= MAX_SCAN_LINES:
            break
        pos += len(raw) + 1
        line = raw[:MAX_LINE]
        if line.startswith(b"#SBATCH"):
            lines.append(line.rstrip(b" \t\r\n\v\f"))
            if len(lines) >= MAX_LINES:
                break
        elif line.strip() and not line.lstrip().startswith(b"#"):
            break
    if not lines:
        return None
    digest = _FNV_OFFSET
    for byte in b"\n".join(lines)[:MAX_HASHED]:
        digest = ((digest ^ byte) * _FNV_PRIME) % 2**64
    return f"{digest:016x}"


def parse_script(script: str, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> ScriptJob:
    """The job a script submits from ``cwd`` (this process's directory by default), with sbatch's
    SBATCH_* variables of ``environ`` over its header (as sbatch takes them). ValueError names the bad
    directive and its line (or variable)."""
    header = Directives(script, environ)
    here = os.getcwd() if cwd is None else cwd
    # sbatch sends the directory it runs in without -D (arg_reset_chdir), a relative -D under it
    # (make_full_path, not normalised): the job's WorkDir, which the models read
    chdir = header.text("chdir")
    chdir = here if chdir is None else chdir if chdir.startswith("/") else f"{here}/{chdir}"
    nodes = header.whole("nodes")
    per_node = header.whole("ntasks-per-node")
    tasks = header.whole("ntasks")
    if tasks is None and per_node is not None:
        tasks = per_node * (nodes or 1)
        tasks = header.bounded(tasks, MAX_COUNT, "ntasks-per-node", "nodes", what=f"{tasks} tasks: ")
    elif tasks is None and (nodes is not None or "extra-node-info" in header):
        tasks = _tasks_by_layout(header, nodes)
    elif tasks is not None and nodes is not None and tasks < nodes:
        nodes = tasks  # sbatch: "can't run 1 processes on 2 nodes, setting nnodes to 1"
    cpt = header.whole("cpus-per-task", MAX_CPUS_PER_TASK)
    cpus = None
    if tasks is not None or cpt is not None:
        cpus = (tasks or 1) * (cpt or 1)
        named = ("ntasks", "ntasks-per-node", "nodes", "cpus-per-task")
        cpus = header.bounded(cpus, MAX_COUNT, *named, what=f"{cpus} CPUs: ")
    partition = header.text("partition")
    request = JobRequest(
        job_name=header.text("job-name"),
        partition=partition.split(",")[0] if partition is not None else None,
        account=header.text("account"),
        qos=header.text("qos"),  # a partition's AllowQos / DenyQos admit by it, as for the hook
        script_signature=script_signature(script),
        work_dir=chdir,
        time_limit_minutes=header.minutes("time"),
        time_min_minutes=header.minutes("time-min"),
        mem_per_node_mb=header.mem("mem"),
        mem_per_cpu_mb=header.mem("mem-per-cpu"),
        min_cpus=cpus,
        cpus_per_task=cpt,
        num_tasks=tasks,
        min_nodes=nodes,
        gpus_per_node=_gpus_per_node(header, nodes, cpt),
        is_array=True if "array" in header else None,
    )
    try:
        training = facts_from_comment(header.text("comment") or "")
    except ValueError as exc:
        raise header.fail(str(exc), "comment") from None
    return ScriptJob(request=request, training=training, exclusive=header.exclusive())


def _tasks_by_layout(header: Directives, nodes: int | None) -> int | None:
    """-N (or -B) without -n, as sbatch's _opt_verify counts its tasks: one a node (-N 4 -c 2 gets 8
    CPUs), and where the node count is no range, times each of the sockets per node, cores per socket
    and threads per core asked (Directives.layout). None for one task."""
    tasks = nodes or 1
    if header.most_nodes() in (None, tasks):
        for factor in header.layout().values():
            tasks *= factor
    named = ("nodes", "extra-node-info", "sockets-per-node", "cores-per-socket", "threads-per-core")
    tasks = header.bounded(tasks, MAX_COUNT, *named, what=f"{tasks} tasks: ")
    return tasks if tasks > 1 else None


# The GPU options, and the job_desc field sbatch sends each in (xfmt_tres: "gres:gpu:" before each item).
_GPU_OPTIONS = ("gpus", "gpus-per-node", "gres", "gpus-per-socket", "gpus-per-task")


def _gpus_per_node(header: Directives, nodes: int | None, cpt: int | None) -> int | None:
    """The job's GPUs per node as accounting records them and training reads them, by the rule of
    plugin/harp/gpus.lua (its header comment: slurmctld 22.05's gres_job_state_validate), which the
    job_submit plugin and the cli_filter hook count by; a change to the rule is made there and here.
    Per GPU type the largest of --gpus, --gpus-per-node (and --gres) x nodes, --gpus-per-socket x
    nodes x sockets per node (else x ceil(tasks / tasks per socket), else x 1), --gpus-per-task x
    tasks (else x 1), the types added up; --ntasks-per-gpu without a GPU ask: tasks / that many. Over
    the node count (1 without -N), rounded up. None for a job that asks no GPU."""
    least, most = nodes or 1, header.most_nodes()
    per_node = header.whole("ntasks-per-node")
    layout = header.layout()
    sockets = layout.get("sockets-per-node")  # the option or -B's part: one field of sbatch's
    per_gpu = header.whole("ntasks-per-tres") or header.whole("ntasks-per-gpu")  # sbatch: tres first
    # The tasks sbatch sends (_opt_verify): -n, else, where the node count is not a range,
    # --ntasks-per-node x nodes, else (-N or -B given, and a layout) nodes x the layout's factors.
    tasks = header.whole("ntasks")
    if tasks is None and most in (None, least):
        if per_node:
            tasks = least * per_node
        elif layout and (nodes is not None or "extra-node-info" in header):
            tasks = _tasks_by_layout(header, nodes)
    # Else slurmctld's, for --gpus-per-task or --ntasks-per-gpu where -N pins the node count:
    # nodes x --ntasks-per-gpu, else nodes when no -c.
    if tasks is None and most == least and (per_gpu or header.gpus("gpus-per-task")):
        if per_gpu:
            tasks = least * per_gpu
        elif cpt is None:
            tasks = least
    per_socket = header.whole("ntasks-per-socket")
    by_socket = least * sockets if sockets else -(-tasks // per_socket) if tasks and per_socket else 1
    times = {"gpus": 1, "gpus-per-node": least, "gres": least, "gpus-per-socket": by_socket,
             "gpus-per-task": tasks or 1}  # fmt: skip
    kinds: dict[str, int] = {}
    for name in _GPU_OPTIONS:
        for kind, count in header.gpus(name).items():
            kinds[kind] = max(kinds.get(kind, 0), count * times[name])
    if not kinds and per_gpu and tasks:
        kinds[""] = tasks // per_gpu
    if not kinds:
        return None
    total = sum(kinds.values())
    named = (*_GPU_OPTIONS, "nodes", "ntasks", "ntasks-per-node", "sockets-per-node", "ntasks-per-socket")
    return header.bounded(-(-total // least), MAX_COUNT, *named, what=f"{total} GPUs over {least} nodes: ")


def facts_from_comment(comment: str) -> TrainingFacts | None:
    """Training facts from ``harp-params=``, ``harp-zero=``, ``harp-precision=`` and
    ``harp-optimizer=`` tokens (None without ``harp-params``). ValueError for a bad value."""
    given: dict[str, str] = {}
    for token in comment.replace(",", " ").split():
        key, sep, value = token.partition("=")
        if sep and key.lower() in _FACT_TOKENS:
            given[_FACT_TOKENS[key.lower()]] = value
    if "parameters" not in given:
        if given:
            raise ValueError(f"comment tokens {sorted(given)} need harp-params=N (the parameter count)")
        return None
    try:
        facts = TrainingFacts(parameters=float(given["parameters"]))
        if "stage" in given:
            facts = replace(facts, stage=int(given["stage"]))
        if "precision" in given:
            facts = replace(facts, precision=given["precision"].lower())
        if "optimizer" in given:
            facts = replace(facts, optimizer=given["optimizer"].lower())
    except ValueError as exc:
        raise ValueError(f"comment token: {exc}") from None
    return facts
