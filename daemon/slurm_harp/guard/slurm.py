"""The guard's subprocess boundary: squeue, scontrol, sacctmgr and sinfo (faked in unit tests).

The guard runs as SlurmUser or root on the controller host, like slurmctld's own tools: raising a
running job's limit needs an operator (an ordinary user may only lower it). The tools run in
SLURM_ZONE: a reservation's times in local time would be ambiguous in the hour that repeats when
clocks go back.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slurm_harp.accounting.fields import slurm_tool_environ

# One slow slurmctld answer must not stall the guard past its lead time.
COMMAND_TIMEOUT_S = 20.0
# The return code of a command cut off at COMMAND_TIMEOUT_S (as timeout(1) gives).
TIMED_OUT = 124
# slurmctld's running configuration: its start (guard.slurmctld_start), what it enforces
# (guard.enforcement).
CONFIG_ARGV = ("scontrol", "show", "config")


@dataclass(frozen=True, slots=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str]], Completed]


def run_command(argv: Sequence[str]) -> Completed:
    """The real Runner, in SLURM_ZONE. Output is decoded leniently: one odd byte in a job's comment
    must not stop the guard. A timeout or a missing binary comes back as a failed Completed."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False, env=slurm_tool_environ()
        )
    except subprocess.TimeoutExpired:
        return Completed(TIMED_OUT, "", f"{argv[0]} timed out after {COMMAND_TIMEOUT_S:g} s")
    except OSError as exc:
        return Completed(127, "", f"{argv[0]}: {exc}")
    return Completed(
        done.returncode,
        done.stdout.decode("utf-8", errors="replace"),
        done.stderr.decode("utf-8", errors="replace"),
    )


class ConfigAfterListing:
    """``scontrol show config`` as read after a poll's listing, at most once a poll: slurmctld's
    start (guard.slurmctld_start) and what it enforces (guard.enforcement) both come from that one
    read. The read before the listing is the start's own: it must be another read."""

    def __init__(self, run: Runner) -> None:
        self._run = run
        self._done: Completed | None = None

    def new_poll(self) -> None:
        """Forget the last poll's read (before this poll's listing)."""
        self._done = None

    def read(self) -> Completed:
        if self._done is None:
            self._done = self._run(CONFIG_ARGV)
        return self._done
