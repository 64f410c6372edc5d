"""`harp import`: SWF traces, Eagle CSVs or saved `sacct -P` text into the job store."""

from __future__ import annotations

import argparse
import logging
import sqlite3
from collections import Counter
from pathlib import Path

from slurm_harp.accounting import JobRecord, ReadStats, load_records
from slurm_harp.accounting.jobstore import JobStore, SchemaVersionError, storable, store_error
from slurm_harp.commands.arguments import delimiter_option, input_problem, warn_if_guessable
from slurm_harp.commands.harvest import default_db

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "import", help="load accounting files (SWF, CSV, sacct -P text) into the job store"
    )
    p.add_argument(
        "sources", nargs="+", metavar="SOURCE", help=".swf / .swf.gz, .csv, or saved sacct -P text"
    )
    p.add_argument("--db", default=default_db(), help="job store (default: $HARP_DB or %(default)s)")
    p.add_argument(
        "--source-name",
        default=None,
        help="source key in the store for every file (default: the file's stem)",
    )
    delimiter_option(p)
    p.set_defaults(func=run)


def source_name(path: str | Path) -> str:
    """``KTH-SP2-1996-2.1-cln.swf.gz`` -> ``KTH-SP2-1996-2.1-cln``."""
    name = Path(path).name
    if name.endswith(".gz"):
        name = name[: -len(".gz")]
    stem = Path(name).stem
    return stem or name


def run(args: argparse.Namespace) -> int:
    # A FIFO or a directory named as what it is (a FIFO would be waited on), before anything is read.
    problems = [problem for source in args.sources if (problem := input_problem(source)) is not None]
    if problems:
        log.error("nothing imported: %s", "; ".join(problems))
        return 2
    try:
        store = JobStore(args.db)
    except sqlite3.Error as exc:
        log.error("nothing imported: %s", store_error(args.db, exc)[0])
        return 2
    except SchemaVersionError as exc:  # names the store
        log.error("nothing imported: %s", exc)
        return 2
    except OSError as exc:
        log.error("nothing imported: job store %s: %s", args.db, exc)
        return 2
    with store:
        failed = _import_all(store, args.sources, args.source_name, args.delimiter)
        try:
            print(f"{args.db}: {store.count()} jobs")
        except sqlite3.Error as exc:
            log.error("cannot count the jobs: %s", store_error(args.db, exc)[0])
            failed = True
    return 1 if failed else 0


class _Earlier:
    """The jobs the files before this one in the command gave, per source: a job given again by a
    later file with other values (two traces sharing a job id and submit time under one
    --source-name) is merged into one row, mixing two jobs, and is said in a warning."""

    def __init__(self) -> None:
        # source -> (job id, submit time) -> (hash of the record, the file that gave it)
        self.jobs: dict[str, dict[tuple[str, int | None], tuple[int, str]]] = {}

    def check(self, records: list[JobRecord], source: str, path: str) -> None:
        seen = self.jobs.setdefault(source, {})
        clashes: Counter[str] = Counter()
        for record in records:
            key = (record.job_id, record.request.submit_time)
            earlier = seen.get(key)
            # The same job read again (overlapping sacct saves) is equal: only other values mix.
            if earlier is not None and earlier[0] != hash(record):
                clashes[earlier[1]] += 1
            seen[key] = (hash(record), path)
        for other, count in clashes.items():
            log.warning(
                "%s: %d jobs have the job id and submit time of jobs %s gave under source %r, with other "
                "values: each pair is one row now, the two jobs' values mixed. Files of different traces "
                "need a --source-name apiece",
                path, count, other, source,
            )  # fmt: skip


def _import_all(store: JobStore, sources: list[str], forced_name: str | None, delimiter: str | None) -> bool:
    """Import every file; True if any could not be read (the others are still imported)."""
    failed = False
    earlier = _Earlier() if len(sources) > 1 else None  # one file: no later file to clash with
    for path in sources:
        name = storable(forced_name or source_name(path))
        stats = ReadStats(source=path)
        warn_if_guessable(path, delimiter)
        try:
            records = load_records(path, stats, delimiter=delimiter)
        except (OSError, ValueError) as exc:
            log.error("cannot import %s: %s", path, exc)
            failed = True
            continue
        try:
            result = store.merge(records, name)
        except sqlite3.Error as exc:  # the store's, not the file's: no later file would fare better
            problem, passes = store_error(store.path, exc)
            again = (
                "import them again then: what is stored already stays as it is"
                if passes
                else "no import will"
            )
            log.error(
                "import stopped: %s; %s and the files after it are not imported (%s)", problem, path, again
            )
            return True
        if earlier is not None:
            earlier.check(records, name, path)
        line = (
            f"{path} -> {name}: {stats.lines} lines, {len(records)} jobs, {stats.bad_lines} bad lines, "
            f"{stats.skipped} skipped, {result.inserted} new, {result.updated} updated"
        )
        try:
            print(line)
        except OSError as exc:  # stdout full or closed: the file is imported, and so are the next ones
            log.warning("%s imported; cannot say so on standard output: %s", path, exc)
        if not records and stats.bad_lines:  # a file of another format, or damaged: said, exit 1
            log.error("%s: no job read, every line bad: not the format its name says?", path)
            failed = True
    return failed
