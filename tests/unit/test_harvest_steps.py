"""A harvest window's jobs keep every step: slurmdbd (22.05) gives a window's jobs only the steps
that ran inside the window, so they are read again by id with no window (sacct_runner.read_steps).
The fake is slurmdbd and sacct at the subprocess boundary, with the step filter of
as_mysql_jobacct_process.c and the job line's TotalCPU summed over the steps returned."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from slurm_harp.accounting import SACCT_FIELDS, sacct_runner
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.commands.harvest import harvest
from tests.unit.test_harvest import _arg, _t, _utc

GIB = 2**30


def _hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _job(job_id: str, end: str) -> dict[str, str]:
    """A job of 10 hours on 8 CPUs ending at ``end`` (UTC)."""
    stop = _utc(end)
    at = {"Submit": stop - 36060, "Start": stop - 36000, "End": stop}
    times = {name: _iso(t) for name, t in at.items()}
    return times | {
        "JobIDRaw": job_id, "JobID": job_id, "JobName": "sim", "User": "alice", "UID": "1000",
        "Account": "phys", "Partition": "batch", "QOS": "normal", "State": "COMPLETED",
        "ExitCode": "0:0", "ElapsedRaw": "36000", "TimelimitRaw": "720", "ReqMem": "40000M",
        "ReqCPUS": "8", "AllocCPUS": "8", "NNodes": "1", "ReqNodes": "1",
        "ReqTRES": "billing=8,cpu=8,mem=40000M,node=1", "WorkDir": "/home/alice", "Flags": "SchedMain",
    }  # fmt: skip


def _step(job: dict[str, str], name: str, hours: tuple[int, int], rss: int, cpu_s: int) -> dict[str, str]:
    """Step ``name`` of ``job`` from its hour ``hours[0]`` to ``hours[1]``."""
    start = _utc(job["Start"])
    first, last = (start + h * 3600 for h in hours)
    return {
        "JobIDRaw": f"{job['JobIDRaw']}.{name}", "JobID": f"{job['JobID']}.{name}", "JobName": name,
        "State": "COMPLETED", "ExitCode": "0:0", "ElapsedRaw": str(last - first), "MaxRSS": str(rss),
        "AllocCPUS": "8", "NNodes": "1", "NTasks": "1", "ReqNodes": "1", "TotalCPU": _hms(cpu_s),
        "Start": _iso(first), "End": _iso(last),
    }  # fmt: skip


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def _mpi_job(job_id: str, end: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The audit's job: a 32 GiB MPI step (10 CPU-hours) in its first 2 hours, then a small
    .batch tail to the end at hour 10."""
    job = _job(job_id, end)
    return job, [_step(job, "batch", (0, 10), 100 * 2**20, 300), _step(job, "0", (0, 2), 32 * GIB, 36000)]


class Slurmdbd:
    """sacct 22.05 over slurmdbd: a window (-S/-E with --state) gives the jobs whose End is in it,
    each with the steps that ran inside it; -j with no -S gives those ids' jobs with every step
    (from the epoch). The job line's TotalCPU is the sum over the steps given, as sacct sums it."""

    def __init__(self, *jobs: tuple[dict[str, str], list[dict[str, str]]]) -> None:
        self.jobs = list(jobs)
        self.windows: list[list[str]] = []
        self.by_id: list[list[str]] = []
        self.fail_by_id = False

    def __call__(self, argv: Sequence[str]) -> str:
        delimiter = next(a.split("=", 1)[1] for a in argv if a.startswith("--delimiter="))
        if "-j" in argv:
            assert not {"-S", "-E"} & set(argv) and not any(a.startswith("--state") for a in argv)
            self.by_id.append(list(argv))
            if self.fail_by_id:
                raise RuntimeError("sacct exited 1: slurmdbd unreachable")
            ids, low, high = set(_arg(argv, "-j").split(",")), 0, 2**40
        else:
            self.windows.append(list(argv))
            ids, low, high = None, _t(argv, "-S"), _t(argv, "-E")
        lines = [delimiter.join(SACCT_FIELDS)]
        for job, steps in self.jobs:
            chosen = job["JobIDRaw"] in ids if ids is not None else low <= _utc(job["End"]) <= high
            if not chosen:
                continue
            kept = [s for s in steps if _utc(s["Start"]) <= high and _utc(s["End"]) >= low]
            cpu = sum(int(s["TotalCPU"][:2]) * 3600 + int(s["TotalCPU"][3:5]) * 60 for s in kept)
            for values in (job | {"TotalCPU": _hms(cpu)}, *kept):
                lines.append(delimiter.join(values.get(name, "") for name in SACCT_FIELDS))
        return "\n".join(lines) + "\n"


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "jobs.sqlite") as s:
        yield s


def _run(store: JobStore, sacct: Slurmdbd, cursor: str | None, now: str = "2024-03-01T20:05:00") -> None:
    if cursor is not None and store.cursor("sacct") is None:
        store.set_cursor("sacct", _utc(cursor))
    harvest(store, sacct, source="sacct", now=_utc(now), overlap_s=3600, settle_s=60)


@pytest.mark.parametrize("cursor", [None, "2024-03-01T19:55:00"], ids=["first run", "every 5 minutes"])
def test_a_step_that_ended_before_the_window_still_counts(store: JobStore, cursor: str | None) -> None:
    """The timer's window (cursor - 1 hour) starts 7 hours after the 32 GiB step ended: before,
    the job was stored with its .batch tail's 100 MB and 300 CPU-seconds."""
    sacct = Slurmdbd(_mpi_job("5001", "2024-03-01T20:00:00"))
    _run(store, sacct, cursor)
    (job,) = store.records("sacct")
    assert (job.max_rss_mb, job.total_cpu_s) == (32 * 1024, 36300)
    (by_id,) = sacct.by_id
    assert _arg(by_id, "-j") == "5001" and "--duplicates" in by_id


def test_a_failed_re_read_stores_nothing_of_the_window_and_the_next_run_reads_it(store: JobStore) -> None:
    sacct = Slurmdbd(_mpi_job("5001", "2024-03-01T20:00:00"))
    sacct.fail_by_id = True
    with pytest.raises(RuntimeError, match="unreachable"):
        _run(store, sacct, "2024-03-01T19:55:00")
    assert store.count("sacct") == 0 and store.cursor("sacct") == _utc("2024-03-01T19:55:00")
    sacct.fail_by_id = False
    _run(store, sacct, None, now="2024-03-01T20:10:00")
    (job,) = store.records("sacct")
    assert job.max_rss_mb == 32 * 1024 and store.cursor("sacct") == _utc("2024-03-01T20:00:00")


def test_the_ids_are_re_read_in_bounded_batches(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sacct_runner, "STEP_IDS_PER_CALL", 2)
    sacct = Slurmdbd(*(_mpi_job(str(5001 + n), f"2024-03-01T19:{30 + n}:00") for n in range(5)))
    _run(store, sacct, "2024-03-01T19:55:00")
    assert [_arg(argv, "-j") for argv in sacct.by_id] == ["5001,5002", "5003,5004", "5005"]
    assert [r.max_rss_mb for r in store.records("sacct")] == [32 * 1024] * 5


def test_a_job_not_found_again_keeps_the_window_and_is_named(
    store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    sacct = Slurmdbd(_mpi_job("5001", "2024-03-01T20:00:00"))
    real = sacct.__call__

    def purged(argv: Sequence[str]) -> str:  # the job purged between the two calls
        text = real(argv)
        return text.split("\n", 1)[0] + "\n" if "-j" in argv else text

    with caplog.at_level(logging.WARNING):
        harvest(store, purged, source="sacct", now=_utc("2024-03-01T20:05:00"), overlap_s=3600, settle_s=60,
                start=_utc("2024-03-01T19:00:00"))  # fmt: skip
    (job,) = store.records("sacct")
    assert job.max_rss_mb == 100 and job.total_cpu_s == 300
    assert "1 jobs not found again by id (purged meanwhile?)" in caplog.text and ": 5001" in caplog.text
