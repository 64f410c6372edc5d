"""Running sacct: the fields harp asks for, its command line, the one subprocess call (a
SacctRunner: argv in, stdout out, faked in unit tests), and a window of jobs or one job run and
read.

A window's jobs are chosen by End, but slurmdbd also keeps only the steps that ran inside it (its
step query: time_start <= -E and time_end >= -S, whatever the other options): a job's MPI step that
ended an hour before its .batch tail was dropped, and with it the job's peak memory and most of its
TotalCPU. So the window's jobs are read again by id with no window (sacct -j, no -S: from the
epoch), and their MaxRSS and TotalCPU are taken from every step (read_steps).

sacct runs in SLURM_ZONE (UTC), which never repeats an hour, and with a delimiter of its own for
each run (sacct_lines.fresh_delimiter), which no user text can hold; sacct.read_sacct reads what
it prints.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from slurm_harp.accounting.fields import SLURM_ZONE, slurm_tool_environ
from slurm_harp.accounting.read_stats import ReadStats
from slurm_harp.accounting.sacct import read_one_job, read_sacct
from slurm_harp.accounting.sacct_lines import fresh_delimiter
from slurm_harp.core.job import FINISHED_STATES, JobRecord
from slurm_harp.core.text import decoded

log = logging.getLogger(__name__)

SACCT_FIELDS: tuple[str, ...] = (
    "JobIDRaw",
    "JobID",
    "JobName",
    "User",
    "UID",
    "Account",
    "Partition",
    "QOS",
    "State",
    "ExitCode",
    # Between two checked columns: a delimiter inside it cannot be mistaken for one in another
    # free-text column (sacct_lines.split_rows).
    "AdminComment",
    "ElapsedRaw",
    "TimelimitRaw",
    "ReqMem",
    "MaxRSS",
    "ReqCPUS",
    "AllocCPUS",
    "NNodes",
    "NTasks",  # on step lines: with NNodes, how many tasks' MaxRSS share a node (accounting.sacct)
    "ReqNodes",
    "TotalCPU",
    "ReqTRES",
    "Submit",
    "Start",
    "End",
    "WorkDir",
    "Flags",
)

# The subprocess boundary: argv in, stdout text out (faked in unit tests).
SacctRunner = Callable[[Sequence[str]], str]
# A whole harvest window of a large site takes a while; a hung slurmdbd must not hang the timer.
SACCT_TIMEOUT_S = 600.0
_LOUD_UNDECODABLE = 20  # lines logged as warnings; the rest at DEBUG
# Job ids per `sacct -j` call re-reading a window's steps: ~11 KB of command line, a bounded IN list.
STEP_IDS_PER_CALL = 1000

# `--state` for finished jobs (the states a record counts as finished). With states given, sacct
# selects terminal jobs by End in [-S, -E] (slurmdbd's time_end BETWEEN), which is what a harvest
# cursor on End needs.
ENDED_STATES: tuple[str, ...] = tuple(sorted(FINISHED_STATES))


def sacct_time(t: int) -> str:
    """Unix time ``t`` as sacct's -S/-E read it under run_sacct: in SLURM_ZONE (UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def sacct_argv(
    selection: Sequence[str],
    *,
    states: Sequence[str] = (),
    delimiter: str = "|",
    fields: Sequence[str] = SACCT_FIELDS,
    duplicates: bool = True,
) -> list[str]:
    """The sacct command line for all users' jobs that ``selection`` picks (sacct's options:
    ``["-S", start, "-E", end]`` or ``["-j", job_id]``). ``duplicates``: every accounting record,
    not only the newest of each job id."""
    argv = ["sacct", "-a", "-P", "--noconvert"]
    if duplicates:
        argv.append("--duplicates")
    if delimiter != "|":
        argv.append(f"--delimiter={delimiter}")
    argv += [*selection, "-o", ",".join(fields)]
    if states:
        argv.append("--state=" + ",".join(states))
    return argv


def run_sacct(argv: Sequence[str]) -> str:
    """The real SacctRunner: run sacct in SLURM_ZONE (TZ; SLURM_CONF and the rest of the environment
    are inherited) and return its stdout, decoded leniently; RuntimeError names the exit code and stderr."""
    env = slurm_tool_environ()
    done = subprocess.run(list(argv), capture_output=True, timeout=SACCT_TIMEOUT_S, check=False, env=env)
    if done.returncode != 0:
        stderr = done.stderr.decode("utf-8", errors="replace").strip()
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {stderr[:500]}")
    return decode_output(done.stdout, argv[0])


def decode_output(data: bytes, source: str) -> str:
    """UTF-8 text of a tool's output. A job name or work dir that is not UTF-8 must not stop a
    harvest: each such byte becomes "?", as the plugin sends it (core.text), and each line holding
    them is logged (the first few loudly)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    bad = 0
    for lineno, line in enumerate(data.split(b"\n"), 1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad += 1
            level = logging.WARNING if bad <= _LOUD_UNDECODABLE else logging.DEBUG
            log.log(level, "%s output line %d is not UTF-8 (%s), read with ? for each bad byte: %r",
                    source, lineno, exc.reason, line[:200])  # fmt: skip
    return decoded(data)


def harvest_sacct(
    runner: SacctRunner,
    start: str,
    end: str | None = None,
    stats: ReadStats | None = None,
    *,
    states: Sequence[str] = (),
) -> list[JobRecord]:
    """Run sacct for jobs that ran between ``start`` and ``end`` (default now; sacct's syntax, a
    date in SLURM_ZONE), in ``states`` if given, and read them. A delimiter no user knew when they
    named their job: no free text forges a row (sacct_lines.fresh_delimiter)."""
    delimiter = fresh_delimiter()
    text = runner(sacct_argv(["-S", start, "-E", end or "now"], states=states, delimiter=delimiter))
    stats = stats or ReadStats(source="sacct")
    # Not splitlines(): it also splits on \x1c-\x1e, \x85 and \u2028, which may sit in a job name.
    records = read_sacct(text.split("\n"), stats, zone=SLURM_ZONE, delimiter=delimiter)
    return read_steps(runner, records, stats)


def read_steps(runner: SacctRunner, records: list[JobRecord], stats: ReadStats) -> list[JobRecord]:
    """``records`` (read from a window) with MaxRSS and TotalCPU over all their steps, from a
    re-read of their ids with no window, STEP_IDS_PER_CALL ids per sacct call. A record the re-read
    does not give back (purged meanwhile) keeps what the window read, in a warning. A failing call
    raises: the harvest stops before storing the window, and the next run reads it again."""
    ids = sorted({r.job_id for r in records}, key=lambda i: (len(i), i))
    full: dict[tuple[str, int | None, int | None], JobRecord] = {}
    reread = ReadStats(source=f"{stats.source} steps")
    for first in range(0, len(ids), STEP_IDS_PER_CALL):
        chunk = ids[first : first + STEP_IDS_PER_CALL]
        delimiter = fresh_delimiter()
        # No -S/-E/--state: sacct -j then reads from the epoch to now, every step of every record
        # of these ids (--duplicates: an id given again has records of its own, told by Submit).
        text = runner(sacct_argv(["-j", ",".join(chunk)], delimiter=delimiter))
        for job in read_sacct(text.split("\n"), reread, zone=SLURM_ZONE, delimiter=delimiter):
            full[_run_key(job)] = job
    # Its bad lines are logged under its own source, not counted again: most are the window's own.
    out: list[JobRecord] = []
    missed: list[str] = []
    for record in records:
        again = full.get(_run_key(record))
        if again is None:
            missed.append(record.job_id)
            out.append(record)
            continue
        rss = record.max_rss_mb if again.max_rss_mb is None else again.max_rss_mb
        cpu = record.total_cpu_s if again.total_cpu_s is None else again.total_cpu_s
        out.append(replace(record, max_rss_mb=rss, total_cpu_s=cpu))
    if missed:
        log.warning(
            "%s: %d jobs not found again by id (purged meanwhile?): their MaxRSS and TotalCPU are from "
            "the steps inside the window alone, maybe too low: %s",
            stats.source, len(missed), ", ".join(missed[:20]),
        )  # fmt: skip
    return out


def _run_key(record: JobRecord) -> tuple[str, int | None, int | None]:
    """One accounting record: its id, submit time (the store's identity) and start (each run)."""
    return record.job_id, record.request.submit_time, record.start_time


def one_job(runner: SacctRunner, job_id: str) -> JobRecord | None:
    """Run sacct for job ``job_id`` (its JobIDRaw) and read it, in any state (pending and running
    too); None when accounting has no such job. sacct gives the newest record of the id alone
    (no --duplicates). With a fresh delimiter, as a harvest: no other job's free text passes for
    this job's row."""
    delimiter = fresh_delimiter()
    text = runner(sacct_argv(["-j", job_id], delimiter=delimiter, duplicates=False))
    return read_one_job(text.split("\n"), job_id, delimiter)
