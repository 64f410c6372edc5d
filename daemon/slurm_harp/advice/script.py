"""A batch script's ``#SBATCH`` header as the job request it submits, for ``harp advise --script``.

Read as sbatch reads it: the directives before the first line that is neither blank nor a
comment. Understood: the job name, partition, account, tasks, CPUs per task, nodes, tasks per
node, time limit, memory (per node or per CPU), GPUs (``--gpus``, ``--gpus-per-node``,
``--gres=gpu[:type]:N``) and the comment. Other options are kept out of the request (they do
not change what the advice compares). The signature is the plugin's (plugin/README.md,
"script_signature"), so a job's history can be matched by its script as well as its name.

Training facts for the GPU-memory check may be given as comment tokens (docs/advice.md):
``#SBATCH --comment="harp-params=7.5e9 harp-zero=2 harp-precision=mixed harp-optimizer=adam"``.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, replace

from slurm_harp.advice.gpu_memory import TrainingFacts
from slurm_harp.core.request import JobRequest
from slurm_harp.slurm_formats import parse_memory_mb, parse_time_limit

__all__ = ["ScriptJob", "facts_from_comment", "parse_script", "script_signature"]

# The plugin's bounds (plugin/harp/request.lua): the signature of a script is the same here.
MAX_SCAN = 65536
MAX_SCAN_LINES = 1024
MAX_LINE = 1024
MAX_LINES = 256
MAX_HASHED = 2048
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

_SHORT = {"-J": "job-name", "-p": "partition", "-A": "account", "-n": "ntasks", "-c": "cpus-per-task",
          "-N": "nodes", "-t": "time", "-G": "gpus"}  # fmt: skip
_LONG = frozenset(
    {"job-name", "partition", "account", "ntasks", "cpus-per-task", "nodes", "ntasks-per-node", "time",
     "mem", "mem-per-cpu", "gpus", "gpus-per-node", "gres", "comment"}
)  # fmt: skip
_FACT_TOKENS = {"harp-params": "parameters", "harp-zero": "stage", "harp-precision": "precision",
                "harp-optimizer": "optimizer"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScriptJob:
    request: JobRequest
    training: TrainingFacts | None = None  # from the comment's harp-* tokens


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


def _directives(script: str) -> list[tuple[str, str]]:
    """(long option name, value) of the header's understood options, in order."""
    out: list[tuple[str, str]] = []
    for number, line in enumerate(script.split("\n"), 1):
        if line.startswith("#SBATCH"):
            try:
                words = shlex.split(line[len("#SBATCH") :])
            except ValueError as exc:
                raise ValueError(f"script line {number}: {exc}") from None
            out += _options(words, number)
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return out


def _options(words: list[str], number: int) -> list[tuple[str, str]]:
    out = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            name, sep, value = word[2:].partition("=")
        elif word[:2] in _SHORT:
            name, value, sep = _SHORT[word[:2]], word[2:].lstrip("="), "=" if len(word) > 2 else ""
        else:
            continue  # an option the advice does not read (or a stray word)
        if name not in _LONG:
            continue
        if not sep:
            if i >= len(words):
                raise ValueError(f"script line {number}: --{name} without a value")
            value = words[i]
            i += 1
        out.append((name, value))
    return out


def _whole(name: str, value: str) -> int:
    low = value.split("-", 1)[0]  # "--nodes=2-4": the least
    if not low.isdigit() or int(low) < 1:
        raise ValueError(f"--{name}={value}: expected a whole number >= 1")
    return int(low)


def _gpus(name: str, value: str) -> int:
    """``2``, ``a100:2``, ``gpu:2``, ``gpu:a100:2`` (gres: every gpu item counted)."""
    total = 0
    for item in value.split(","):
        parts = item.split(":")
        if name == "gres" and parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > (1 if name == "gres" else 0) else "1"
        total += _whole(name, count.split("(")[0])
    return total


def parse_script(script: str) -> ScriptJob:
    """The job a script submits. ValueError names the bad directive."""
    values: dict[str, str] = {}
    for name, value in _directives(script):
        values[name] = value  # the last one wins, as in sbatch
    try:
        nodes = _whole("nodes", values["nodes"]) if "nodes" in values else None
        per_node = (
            _whole("ntasks-per-node", values["ntasks-per-node"]) if "ntasks-per-node" in values else None
        )
        tasks = _whole("ntasks", values["ntasks"]) if "ntasks" in values else None
        if tasks is None and per_node is not None:
            tasks = per_node * (nodes or 1)
        cpt = _whole("cpus-per-task", values["cpus-per-task"]) if "cpus-per-task" in values else None
        gpus_node = None
        if "gpus-per-node" in values:
            gpus_node = _gpus("gpus-per-node", values["gpus-per-node"])
        elif "gres" in values:
            gpus_node = _gpus("gres", values["gres"]) or None
        elif "gpus" in values:
            gpus_node = math.ceil(_gpus("gpus", values["gpus"]) / (nodes or 1))
        time = parse_time_limit(values["time"]) if "time" in values else None
        mem_node = _mem("mem", values.get("mem"))
        mem_cpu = _mem("mem-per-cpu", values.get("mem-per-cpu"))
    except ValueError as exc:
        raise ValueError(f"#SBATCH {exc}") from None
    cpus = (tasks or 1) * (cpt or 1) if tasks is not None or cpt is not None else None
    request = JobRequest(
        job_name=values.get("job-name"),
        partition=values["partition"].split(",")[0] if "partition" in values else None,
        account=values.get("account"),
        script_signature=script_signature(script),
        time_limit_minutes=time,
        mem_per_node_mb=mem_node,
        mem_per_cpu_mb=mem_cpu,
        min_cpus=cpus,
        cpus_per_task=cpt,
        num_tasks=tasks,
        min_nodes=nodes,
        gpus_per_node=gpus_node,
    )
    return ScriptJob(request=request, training=facts_from_comment(values.get("comment", "")))


def _mem(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return math.ceil(parse_memory_mb(value))
    except ValueError:
        raise ValueError(f"--{name}={value}: expected an amount such as 4000, 4000M or 4G") from None


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
