"""A batch script's ``#SBATCH`` header as the job request it submits, for ``harp advise --script``.

Read as sbatch reads it: the words of the directives before the first line that is neither blank
nor a comment, and before a ``hetjob`` line, split as sbatch splits them (comments, quotes:
sbatch_header.py), a short option's value the rest of its word (getopt: ``-J=x`` names the job
``=x``), a long option by any prefix sbatch takes for it (``--part``: sbatch_options.py).
Understood: the job name, partition, account, QOS, tasks, CPUs per task, nodes, tasks per node, time
limit, memory (per node or per CPU, as sbatch's str_to_mbytes reads it), GPUs (``--gpus``,
``--gpus-per-node``, ``--gres=gpu[:type][:N]``, ``--gpus-per-socket``, ``--gpus-per-task``,
``--ntasks-per-gpu``; a type without a count is one GPU; counted as accounting counts them, by
plugin/harp/gpus.lua's rule: ``_gpus_per_node``), the comment, and
whether the job holds whole nodes (``--exclusive``, which ``--oversubscribe`` or ``-s`` after it
undoes: both set one field of sbatch's). Other options are kept out of the request (they do not
change what the advice compares).
The signature is the plugin's (plugin/README.md, "script_signature"), so a job's history can be
matched by its script as well as its name.

Training facts for the GPU-memory check may be given as comment tokens (docs/advice.md):
``#SBATCH --comment="harp-params=7.5e9 harp-zero=2 harp-precision=mixed harp-optimizer=adam"``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from slurm_harp.advice.gpu_memory import TrainingFacts
from slurm_harp.advice.sbatch_header import header_words
from slurm_harp.advice.sbatch_options import long_option, takes_value
from slurm_harp.core.request import JobRequest
from slurm_harp.slurm_formats import OutOfRange, parse_time_limit

__all__ = [
    "MAX_COUNT",
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
# The largest values Slurm holds, as the plugin bounds them (below NO_VAL16 and NO_VAL; memory below
# 2**53, exact in Lua): a larger one is refused with its line, not sent as a number no field holds.
MAX_CPUS_PER_TASK = 65533
MAX_COUNT = 4294967293
MAX_MEM_MB = 2**53 - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3

_SHORT = {"-J": "job-name", "-p": "partition", "-A": "account", "-q": "qos", "-n": "ntasks",
          "-c": "cpus-per-task", "-N": "nodes", "-t": "time", "-G": "gpus"}  # fmt: skip
_LONG = frozenset(
    {"job-name", "partition", "account", "qos", "ntasks", "cpus-per-task", "nodes", "ntasks-per-node",
     "time", "mem", "mem-per-cpu", "gpus", "gpus-per-node", "gres", "comment", "gpus-per-socket",
     "gpus-per-task", "sockets-per-node", "ntasks-per-socket", "ntasks-per-gpu", "ntasks-per-tres"}
)  # fmt: skip
# --mem and --mem-per-cpu as sbatch reads them (str_to_mbytes, Slurm 22.05): whole MB, or K (rounded
# up), M, G or T, a B after the unit allowed ("4GB"); no fraction, no P: sbatch refuses those. Only
# sbatch's options read so: slurm_formats.parse_memory_mb reads what Slurm's tools print.
_SBATCH_MEMORY = re.compile(r"\+?([0-9]+)(?:([KMGT])B?)?", re.I)
_SBATCH_MB = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
_FACT_TOKENS = {"harp-params": "parameters", "harp-zero": "stage", "harp-precision": "precision",
                "harp-optimizer": "optimizer"}  # fmt: skip


# --exclusive's values (Slurm 22.05 arg_set_exclusive, any case): only "exclusive", the bare option's,
# gives whole nodes; "user" and "mcs" give nodes to one user's (MCS label's) jobs, each as it asks.
# --oversubscribe (-s) sets the same field to "oversubscribe": the last of them wins.
_SHARING = ("exclusive", "oversubscribe", "user", "mcs")
_SHORT_FLAGS = {"-s": "oversubscribe"}


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


def _directives(script: str) -> list[tuple[str, str, int]]:
    """(long option name, value, script line number) of the header's understood options, in order:
    the header's words as sbatch splits them (advice.sbatch_header), read as its getopt reads them."""
    words = header_words(script)
    out = []
    i = 0
    while i < len(words):
        word, number = words[i]
        i += 1
        if word.startswith("--"):  # a prefix of one option's name is that option (getopt_long)
            given, sep, value = word[2:].partition("=")
            try:
                name = long_option(given)
            except ValueError as exc:
                raise ValueError(f"script line {number}: {exc}") from None
            if name not in _LONG and not sep and takes_value(name):
                i += 1  # its value, the next word, is no option of its own (--output -J.log)
        elif word[:2] in _SHORT:  # getopt: the rest of the word is the value, "=" too ("-J=x": "=x")
            name, value, sep = _SHORT[word[:2]], word[2:], "=" if len(word) > 2 else ""
        elif word[:2] in _SHORT_FLAGS:
            name, value, sep = _SHORT_FLAGS[word[:2]], "", ""
        else:
            continue  # an option the advice does not read (or a stray word)
        if name in ("exclusive", "oversubscribe"):  # one field, no value but after "=" (optional_argument)
            out.append(("exclusive", value if sep else name, number))
            continue
        if name not in _LONG:
            continue
        if not sep:  # the next word, on the next line too: sbatch gives getopt all lines as one list
            if i >= len(words):
                raise ValueError(f"script line {number}: --{name} without a value")
            value = words[i][0]
            i += 1
        out.append((name, value, number))
    return out


class _Header:
    """The header's last value of each option (the last one wins, as in sbatch), each read into a
    number or refused with a ValueError naming the option, the value and its script line."""

    def __init__(self, script: str) -> None:
        self.given = {name: (value, number) for name, value, number in _directives(script)}

    def __contains__(self, name: str) -> bool:
        return name in self.given

    def text(self, name: str) -> str | None:
        return self.given[name][0] if name in self.given else None  # JobRequest applies core.text

    def where(self, *names: str) -> str:
        """``script line N: --name=value`` of the given options, for a message; a value of more
        than 40 characters cut there (the message of a megabyte --time= is a line, not a megabyte)."""
        found = sorted((self.given[n][1], n) for n in names if n in self.given)
        numbers = sorted({number for number, _ in found})
        lines = ", ".join(map(str, numbers))
        return f"script line{'s' if len(numbers) > 1 else ''} {lines}: " + " ".join(
            f"--{n}={_shown(self.given[n][0])}" for _, n in found
        )

    def fail(self, rule: str, *names: str) -> ValueError:
        return ValueError(f"{self.where(*names)}: {rule}")

    def whole(self, name: str, most: int = MAX_COUNT) -> int | None:
        if name not in self.given:
            return None
        return self._whole(name, self.given[name][0].split("-", 1)[0], most)  # "2-4": the least

    def _whole(self, name: str, text: str, most: int) -> int:
        # A digit string too long for int() (4300 digits) is a number, just too large.
        value = (int(text) if len(text) < 40 else math.inf) if text.isascii() and text.isdigit() else 0
        if value < 1:
            raise self.fail("expected a whole number >= 1", name)
        return self.bounded(value, most, name)

    def most_nodes(self) -> int | None:
        """The upper bound of -N as sbatch sends it (max_nodes): 2 for ``2``, 4 for ``2-4``; None
        without -N or an upper bound (``2-``)."""
        if "nodes" not in self.given:
            return None
        most = self.given["nodes"][0].split("-", 1)[-1]
        return self._whole("nodes", most, MAX_COUNT) if most else None

    def bounded(self, value: float, most: int, *names: str, what: str = "", unit: str = "") -> int:
        if not value <= most:
            raise self.fail(f"{what}more than Slurm allows (at most {most}{unit})", *names)
        return math.ceil(value)

    def gpus(self, name: str) -> dict[str, int]:
        """The GPUs of each type: ``2``, ``a100:2``, ``a100``, ``gpu``, ``gpu:2``, ``gpu:a100``,
        ``gpu:a100:2`` (gres: its gpu items). A type without a count is one GPU, as Slurm reads it
        (and the hook); no type is a type of its own (""); of two items of one type, the larger."""
        kinds: dict[str, int] = {}
        for item in self.given[name][0].split(",") if name in self.given else ():
            parts = item.split("(")[0].split(":")
            if name == "gres":
                if parts[0] != "gpu":
                    continue
                parts = parts[1:]
            elif not item:
                continue
            typed = len(parts) == 1 and not parts[0].isdigit()  # [type:]count: a type alone
            kind, count = (":".join(parts), "1") if not parts or typed else (":".join(parts[:-1]), parts[-1])
            kinds[kind] = max(kinds.get(kind, 0), self._whole(name, count, MAX_COUNT))
        total = sum(kinds.values())
        self.bounded(total, MAX_COUNT, name, what=f"{total} GPUs: ")
        return kinds

    def exclusive(self) -> bool:
        """Whether the job holds whole nodes: its last --exclusive (a bare one, or =exclusive) not
        undone by an --oversubscribe after it. A value sbatch refuses is refused so."""
        if "exclusive" not in self.given:
            return False
        value = self.given["exclusive"][0].lower()
        if value not in _SHARING:
            raise self.fail("expected no value, or =exclusive, =oversubscribe, =user or =mcs", "exclusive")
        return value == "exclusive"

    def minutes(self, name: str) -> int | None:
        if name not in self.given:
            return None
        limit: float | None
        try:
            limit = parse_time_limit(self.given[name][0])
        except OutOfRange:
            limit = math.inf
        except ValueError as exc:
            raise self.fail(str(exc), name) from None
        return None if limit is None else self.bounded(limit, MAX_COUNT, name, unit=" minutes")

    def mem(self, name: str) -> int | None:
        if name not in self.given:
            return None
        found = _SBATCH_MEMORY.fullmatch(self.given[name][0])
        if found is None:
            raise self.fail("expected a whole amount such as 4000, 4000M, 4G or 4GB", name)
        digits, unit = found.groups()
        number = int(digits) if len(digits) < 40 else math.inf  # past int()'s digits: too large anyway
        return self.bounded(number * _SBATCH_MB[(unit or "").upper()], MAX_MEM_MB, name, unit=" MB")


def _shown(value: str) -> str:
    return value if len(value) <= 40 else f"{value[:40]}..."


def parse_script(script: str) -> ScriptJob:
    """The job a script submits. ValueError names the bad directive and its line."""
    header = _Header(script)
    nodes = header.whole("nodes")
    per_node = header.whole("ntasks-per-node")
    tasks = header.whole("ntasks")
    if tasks is None and per_node is not None:
        tasks = per_node * (nodes or 1)
        tasks = header.bounded(tasks, MAX_COUNT, "ntasks-per-node", "nodes", what=f"{tasks} tasks: ")
    elif tasks is None and nodes is not None and nodes > 1:
        tasks = nodes  # -N without -n: Slurm runs one task per node (-N 4 -c 2 gets 8 CPUs)
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
        time_limit_minutes=header.minutes("time"),
        mem_per_node_mb=header.mem("mem"),
        mem_per_cpu_mb=header.mem("mem-per-cpu"),
        min_cpus=cpus,
        cpus_per_task=cpt,
        num_tasks=tasks,
        min_nodes=nodes,
        gpus_per_node=_gpus_per_node(header, nodes, cpt),
    )
    try:
        training = facts_from_comment(header.text("comment") or "")
    except ValueError as exc:
        raise header.fail(str(exc), "comment") from None
    return ScriptJob(request=request, training=training, exclusive=header.exclusive())


# The GPU options, and the job_desc field sbatch sends each in (xfmt_tres: "gres:gpu:" before each item).
_GPU_OPTIONS = ("gpus", "gpus-per-node", "gres", "gpus-per-socket", "gpus-per-task")


def _gpus_per_node(header: _Header, nodes: int | None, cpt: int | None) -> int | None:
    """The job's GPUs per node as accounting records them and training reads them, by the rule of
    plugin/harp/gpus.lua (its header comment: slurmctld 22.05's gres_job_state_validate), which the
    job_submit plugin and the cli_filter hook count by; a change to the rule is made there and here.
    Per GPU type the largest of --gpus, --gpus-per-node (and --gres) x nodes, --gpus-per-socket x
    nodes x sockets per node (else x ceil(tasks / tasks per socket), else x 1), --gpus-per-task x
    tasks (else x 1), the types added up; --ntasks-per-gpu without a GPU ask: tasks / that many. Over
    the node count (1 without -N), rounded up. None for a job that asks no GPU."""
    least, most = nodes or 1, header.most_nodes()
    per_node = header.whole("ntasks-per-node")
    sockets = header.whole("sockets-per-node")
    per_gpu = header.whole("ntasks-per-tres") or header.whole("ntasks-per-gpu")  # sbatch: tres first
    # The tasks sbatch sends (_opt_verify): -n, else, where the node count is not a range,
    # --ntasks-per-node x nodes, else (-N given) --sockets-per-node x nodes.
    tasks = header.whole("ntasks")
    if tasks is None and most in (None, least):
        if per_node:
            tasks = least * per_node
        elif nodes and sockets:
            tasks = nodes * sockets
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
