"""sbatch's long options, so that an ``#SBATCH`` line's option is the one sbatch reads.

sbatch reads its options, the script's too, with getopt_long: an option may be given by any prefix
of its name that no other of sbatch's options begins with (``--part=batch`` is ``--partition``);
a name given whole wins over the longer ones it begins (``--mem``, ``--gres``, ``--time``); a
prefix that several begin with is refused (``--gpus-per``). The names are sbatch's in Slurm 22.05
(``src/common/slurm_opt.c``: those with a ``set_func`` or ``set_func_sbatch``); 23.02 to 25.05 add
and drop a few, but no prefix of an option the advice reads then names another. A site's SPANK
plugins add options of their own, unknown here: where one makes a prefix ambiguous, sbatch
refuses the script and the advice still reads it.
"""

from __future__ import annotations

__all__ = ["long_option", "takes_value"]

# The value of these is the next word when the option has no "=" (getopt's required_argument).
_VALUED = frozenset(
    {"account", "acctg-freq", "array", "batch", "bb", "bbf", "begin", "chdir", "cluster",
     "cluster-constraint", "clusters", "comment", "constraint", "container", "context", "core-spec",
     "cores-per-socket", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline", "delay-boot", "dependency",
     "distribution", "error", "exclude", "export", "export-file", "extra-node-info", "gid", "gpu-bind",
     "gpu-freq", "gpus", "gpus-per-node", "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "hint",
     "input", "job-name", "kill-on-invalid-dep", "licenses", "mail-type", "mail-user", "mcs-label", "mem",
     "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "network", "nodefile", "nodelist", "nodes",
     "ntasks", "ntasks-per-core", "ntasks-per-gpu", "ntasks-per-node", "ntasks-per-socket",
     "ntasks-per-tres", "open-mode", "output", "partition", "power", "prefer", "priority", "profile", "qos",
     "reservation", "signal", "sockets-per-node", "switches", "tasks-per-node", "thread-spec",
     "threads-per-core", "time", "time-min", "tmp", "uid", "wait-all-nodes", "wckey", "wrap"}
)  # fmt: skip
# These take none, or only after an "=" (no_argument, optional_argument).
_FLAGS = frozenset(
    {"contiguous", "exclusive", "get-user-env", "help", "hold", "ignore-pbs", "nice", "no-kill",
     "no-requeue", "overcommit", "oversubscribe", "parsable", "propagate", "quiet", "reboot", "requeue",
     "spread-job", "test-only", "usage", "use-min-nodes", "verbose", "version", "wait"}
)  # fmt: skip
# One option under two names (getopt_long's same val: no prefix of one begins the other).
_SAME = {"tasks-per-node": "ntasks-per-node"}


def long_option(given: str) -> str:
    """The option sbatch reads ``--given`` as: ``given`` itself when it is an option's whole name,
    else the one option it begins, else ``given`` (no option of stock sbatch: a SPANK plugin's, or
    one sbatch refuses; the advice reads neither). ValueError when several options begin with it,
    naming them, as getopt does."""
    if given in _VALUED or given in _FLAGS or not given:
        return _SAME.get(given, given)
    begun = sorted(n for n in _VALUED | _FLAGS if n.startswith(given))
    if len(begun) > 1:
        said = " ".join(f"'--{n}'" for n in begun)
        raise ValueError(f"option '--{given}' is ambiguous; possibilities: {said} (sbatch refuses it)")
    return _SAME.get(begun[0], begun[0]) if begun else given


def takes_value(name: str) -> bool:
    """Whether the option ``name`` (whole, as long_option gives it) takes the next word as its value
    when given without "=": that word is then no option, whatever it looks like (``--output -Jx``)."""
    return name in _VALUED
