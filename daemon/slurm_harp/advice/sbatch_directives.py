"""The options a batch script's ``#SBATCH`` header and sbatch's input environment give, as sbatch
takes them, each read into a number or refused naming where it was given.

The header's words (advice.sbatch_header) are read as sbatch's getopt reads them
(advice.sbatch_options): a short option's value the rest of its word (``-J=x`` names the job ``=x``),
short options sharing a word (``-Hn4``), a long option by any prefix sbatch takes for it (``--part``),
a word that is no option refused; the last value of an option wins. Then the
``SBATCH_*`` variables of the options the advice reads, which sbatch reads after the script and
before its command line (Slurm 22.05 ``process_options_second_pass``): a variable overrides the
script's value of its option. Of the memory options, as ``_validate_memory_options`` takes them, one
the script gives (and no variable overrides) wins over the variables of the others; two given by the
script, or two by variables, are refused as sbatch refuses them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from slurm_harp.advice.sbatch_header import header_words
from slurm_harp.advice.sbatch_options import options, shown
from slurm_harp.slurm_formats import OutOfRange, parse_time_limit

__all__ = ["ENVIRONMENT", "MAX_COUNT", "MAX_CPUS_PER_TASK", "MAX_MEM_MB", "Directives"]

# The largest values Slurm holds, as the plugin bounds them (below NO_VAL16 and NO_VAL; memory below
# 2**53, exact in Lua): a larger one is refused with its line, not sent as a number no field holds.
MAX_CPUS_PER_TASK = 65533
MAX_COUNT = 4294967293
MAX_MEM_MB = 2**53 - 1

_LONG = frozenset(
    {"job-name", "partition", "account", "qos", "ntasks", "cpus-per-task", "nodes", "ntasks-per-node",
     "time", "mem", "mem-per-cpu", "mem-per-gpu", "gpus", "gpus-per-node", "gres", "comment",
     "gpus-per-socket", "gpus-per-task", "sockets-per-node", "ntasks-per-socket", "ntasks-per-gpu",
     "ntasks-per-tres", "extra-node-info", "cores-per-socket", "threads-per-core", "time-min", "array",
     "chdir"}
)  # fmt: skip
# Each node's layout: -B S[:C[:T]] and the options that set one of its fields.
_LAYOUT = ("sockets-per-node", "cores-per-socket", "threads-per-core")
# sbatch's input variables (src/sbatch/opt.c env_vars, Slurm 22.05) of the options read here; the
# others (SBATCH_CPUS_PER_GPU, SBATCH_THREADS_PER_CORE, ...) are of options the advice does not read.
ENVIRONMENT = {
    "SBATCH_ACCOUNT": "account", "SBATCH_EXCLUSIVE": "exclusive", "SBATCH_GRES": "gres",
    "SBATCH_GPUS": "gpus", "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_SOCKET": "gpus-per-socket", "SBATCH_GPUS_PER_TASK": "gpus-per-task",
    "SBATCH_JOB_NAME": "job-name", "SBATCH_MEM_PER_CPU": "mem-per-cpu",
    "SBATCH_MEM_PER_GPU": "mem-per-gpu", "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_PARTITION": "partition", "SBATCH_QOS": "qos", "SBATCH_TIMELIMIT": "time",
}  # fmt: skip
_MEMORY = ("mem", "mem-per-cpu", "mem-per-gpu")
# --mem and --mem-per-cpu as sbatch reads them (str_to_mbytes, Slurm 22.05): whole MB, or K (rounded
# up), M, G or T, a B after the unit allowed ("4GB"); no fraction, no P: sbatch refuses those. Only
# sbatch's options read so: slurm_formats.parse_memory_mb reads what Slurm's tools print.
_SBATCH_MEMORY = re.compile(r"\+?([0-9]+)(?:([KMGT])B?)?", re.I)
_SBATCH_MB = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}
# --exclusive's values (Slurm 22.05 arg_set_exclusive, any case): only "exclusive", the bare option's,
# gives whole nodes; "user" and "mcs" give nodes to one user's (MCS label's) jobs, each as it asks.
# --oversubscribe (-s) sets the same field to "oversubscribe": the last of them wins.
_SHARING = ("exclusive", "oversubscribe", "user", "mcs")

# Where an option was given: its script line, or the variable it came from.
Origin = int | str


def _script_options(script: str) -> list[tuple[str, str, int]]:
    """(long option name, value, script line number) of the header's options read here, in order."""
    out = []
    for name, value, line in options(header_words(script)):
        if name in ("exclusive", "oversubscribe"):  # one field, no value but after "=" (optional_argument)
            out.append(("exclusive", name if value is None else value, line))
        elif name in _LONG and value is not None:
            out.append((name, value, line))
    return out


class Directives:
    """The job's value of each option read here, each read into a number or refused with a
    ValueError naming the option, the value and where it was given (its script line, or its
    SBATCH_* variable)."""

    def __init__(self, script: str, environ: Mapping[str, str] | None = None) -> None:
        given: dict[str, tuple[str, Origin]] = {}
        for name, value, number in _script_options(script):
            given[name] = (value, number)
        for variable, name in ENVIRONMENT.items():
            if environ is not None and variable in environ:
                value = environ[variable]
                # An empty --exclusive is the bare option, as sbatch takes the variable (optional_argument).
                given[name] = ("exclusive" if name == "exclusive" and not value else value, variable)
        self.given = given
        self._one_memory_option()

    def _one_memory_option(self) -> None:
        by_script = [n for n in _MEMORY if n in self.given and isinstance(self.given[n][1], int)]
        by_environment = [n for n in _MEMORY if n in self.given and n not in by_script]
        if len(by_script) > 1:
            raise self.fail("sbatch takes one of --mem, --mem-per-cpu and --mem-per-gpu", *by_script)
        if not by_script and len(by_environment) > 1:
            raise self.fail("sbatch takes one of these variables", *by_environment)
        for name in by_environment if by_script else ():
            del self.given[name]  # the script's option wins over another's variable

    def __contains__(self, name: str) -> bool:
        return name in self.given

    def text(self, name: str) -> str | None:
        return self.given[name][0] if name in self.given else None  # JobRequest applies core.text

    def where(self, *names: str) -> str:
        """``script line N: --name=value`` of the given options (``SBATCH_X=value`` of those from
        the environment), for a message; a value of more than 40 characters cut there (the message
        of a megabyte --time= is a line, not a megabyte)."""
        origins = [(self.given[n][1], n) for n in names if n in self.given]
        lines = sorted((o, n) for o, n in origins if isinstance(o, int))
        variables = sorted((o, n) for o, n in origins if isinstance(o, str))
        parts = []
        if lines:
            numbers = sorted({number for number, _ in lines})
            parts.append(
                f"script line{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}: "
                + " ".join(f"--{n}={shown(self.given[n][0])}" for _, n in lines)
            )
        if variables:
            parts.append("environment: " + " ".join(f"{v}={shown(self.given[n][0])}" for v, n in variables))
        return "; ".join(parts)

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

    def layout(self) -> dict[str, int]:
        """The sockets per node, cores per socket and threads per core asked, those given, by option
        name: each by its own option, else by -B's part (``2:4:1``; a range ``2-4`` is its least, ``*``
        none), as sbatch reads -B (verify_socket_core_thread_count) into the job's fields.
        ``-N 1 -B 2:4`` without -n is 8 tasks."""
        parts = self.given["extra-node-info"][0].split(":", 2) if "extra-node-info" in self.given else []
        out = {}
        for at, name in enumerate(_LAYOUT):
            if name in self.given:
                out[name] = self._whole(name, self.given[name][0], MAX_COUNT)
            elif at < len(parts) and parts[at] not in ("*", ""):
                out[name] = self._whole("extra-node-info", parts[at].split("-", 1)[0], MAX_COUNT)
        return out

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
