"""sbatch's options, and a batch script's words read into them as sbatch's getopt_long reads them.

sbatch gives the words of all its ``#SBATCH`` lines to getopt_long as one argument list (Slurm 22.05
``_set_options`` in ``src/sbatch/opt.c``, its option string from ``slurm_option_table_create``):

- a long option may be given by any prefix of its name that no other of sbatch's options begins with
  (``--part=batch`` is ``--partition``); a name given whole wins over the longer ones it begins
  (``--mem``, ``--gres``, ``--time``); a prefix that several begin with is refused (``--gpus-per``);
- short options may share a word (``-Hn4`` is ``-H -n 4``); one that takes a value takes the rest of
  its word, else the next word, whatever it looks like (``-o -n3.log`` names the output ``-n3.log``);
- the option string begins with ``+``: reading stops at the first word that is no option, and sbatch
  then refuses the script (``Invalid directive found in batch script``), as it refuses an unknown
  short option (``invalid option -- 'Z'``). ``--`` ends the options: only the last word may be it.

The names are sbatch's in Slurm 22.05 (``src/common/slurm_opt.c``: those with a ``set_func`` or
``set_func_sbatch``); 23.02 to 25.05 add and drop a few, but no prefix of an option the advice reads
then names another. A site's SPANK plugins add long options of their own, unknown here: one is
passed over with the word after it, if that is no option (its value, if it takes one); where one
makes a prefix ambiguous, sbatch refuses the script and the advice still reads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

__all__ = ["options", "shown"]

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
# sbatch's short options: those that take a value (required_argument), those that take none, and -k,
# whose value can only be the rest of its word (optional_argument).
_SHORT_VALUED = {
    "A": "account", "B": "extra-node-info", "C": "constraint", "D": "chdir", "F": "nodefile",
    "G": "gpus", "J": "job-name", "L": "licenses", "M": "clusters", "N": "nodes", "S": "core-spec",
    "a": "array", "b": "begin", "c": "cpus-per-task", "d": "dependency", "e": "error", "i": "input",
    "m": "distribution", "n": "ntasks", "o": "output", "p": "partition", "q": "qos", "t": "time",
    "w": "nodelist", "x": "exclude",
}  # fmt: skip
_SHORT_FLAGS = {"H": "hold", "O": "overcommit", "Q": "quiet", "V": "version", "W": "wait", "h": "help",
                "s": "oversubscribe", "v": "verbose", "?": "help"}  # fmt: skip
_SHORT_OPTIONAL = {"k": "no-kill"}


def _long_option(given: str) -> str:
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


def _takes_value(name: str) -> bool:
    """Whether the option ``name`` (whole, as _long_option gives it) takes the next word as its value
    when given without "=": that word is then no option, whatever it looks like (``--output -Jx``)."""
    return name in _VALUED


def options(words: Sequence[tuple[str, int]]) -> Iterator[tuple[str, str | None, int]]:
    """(option's whole long name, its value or None, line) of each option in ``words`` ((word, line)
    of a script's header, in order), as sbatch's getopt_long gives them. ValueError names the line
    of a word sbatch refuses the script for."""
    i = 0
    while i < len(words):
        word, line = words[i]
        i += 1
        if word == "--":
            if i < len(words):
                raise _no_option(words[i])
            return
        if word.startswith("--"):
            given, sep, value = word[2:].partition("=")
            try:
                name = _long_option(given)
            except ValueError as exc:
                raise ValueError(f"script line {line}: {exc}") from None
            if sep:
                yield name, value, line
            elif _takes_value(name):
                if i == len(words):
                    raise ValueError(f"script line {line}: --{name} without a value")
                yield name, words[i][0], line
                i += 1
            elif name in _FLAGS:
                yield name, None, line
            elif i < len(words) and not words[i][0].startswith("-"):
                i += 1  # an unknown option's (a SPANK plugin's): the word after it may be its value
            continue
        if len(word) < 2 or word[0] != "-":
            raise _no_option((word, line))
        for at in range(1, len(word)):
            letter, rest = word[at], word[at + 1 :]
            if letter in _SHORT_VALUED:
                if not rest:
                    if i == len(words):
                        raise ValueError(f"script line {line}: --{_SHORT_VALUED[letter]} without a value")
                    rest = words[i][0]
                    i += 1
                yield _SHORT_VALUED[letter], rest, line
                break
            if letter in _SHORT_OPTIONAL:
                yield _SHORT_OPTIONAL[letter], rest or None, line
                break
            if letter not in _SHORT_FLAGS:
                raise ValueError(f"script line {line}: invalid option -- '{letter}' (sbatch refuses it)")
            yield _SHORT_FLAGS[letter], None, line


def shown(text: str) -> str:
    """``text`` for a message, cut at 40 characters (the message of a megabyte word is a line)."""
    return text if len(text) <= 40 else f"{text[:40]}..."


def _no_option(word: tuple[str, int]) -> ValueError:
    text, line = word
    return ValueError(
        f"script line {line}: {shown(text)!r} is no option: sbatch refuses the script "
        "(Invalid directive found in batch script)"
    )
