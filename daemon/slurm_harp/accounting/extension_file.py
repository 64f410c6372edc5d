"""The conditional extension's history, as a small file beside the job store for `harp guard`.

`harp harvest` writes it after each run: the binned run time / prediction of the tagged jobs that
ended in the last WINDOW_DAYS (core.extension.ConditionalRatios). The guard reads this file rather
than the store: it runs as SlurmUser, which may read the store (group) but cannot open a WAL-mode
SQLite database read-only when no writer has it open (SQLite must then create its -shm file).
Written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.core.extension import WINDOW_DAYS, ConditionalRatios, observed_ratio
from slurm_harp.regular_file import read_json
from slurm_harp.state_dir import replace_file

log = logging.getLogger(__name__)

FORMAT = 1
MAX_BYTES = 1 << 20  # a few KB when sound: anything bigger is not ours
MAX_COMPUTED = 1 << 40  # seconds since 1970: year 36812


def path_for(db: Path) -> Path:
    """Where the file of the job store at ``db`` lives: ``jobs.sqlite`` -> ``jobs.extension.json``."""
    return db.with_name(db.stem + ".extension.json")


def ratios_from(store: JobStore, now: float, window_days: int = WINDOW_DAYS) -> ConditionalRatios:
    """The ratios of the tagged jobs that ended in the last ``window_days``. A job whose ratio
    raises is left out, counted in one warning naming the first: one record must not stop every
    harvest after it (a tag's 400-digit number once raised OverflowError here on each run)."""
    ratios = ConditionalRatios()
    failed, first = 0, ""
    for record in store.records(ended_since=int(now - window_days * 86400), tagged=True):
        try:
            ratio = observed_ratio(record)
            if ratio is not None:
                ratios.add(ratio)
        except Exception as exc:  # any one record: logged below, the rest still count
            failed, first = failed + 1, first or f"job {record.job_id!r:.40}: {type(exc).__name__}: {exc}"
    if failed:
        log.warning(
            "extension history: %d tagged jobs left out, their ratio does not compute (%s)", failed, first
        )
    return ratios


def write(path: Path, ratios: ConditionalRatios, now: float, window_days: int = WINDOW_DAYS) -> None:
    body = {
        "format": FORMAT,
        "computed": int(now),
        "window_days": window_days,
        "bins_per_decade": ratios.BINS_PER_DECADE,
        "counts": ratios.counts,
    }
    # A new file of a name no one could foresee, renamed into place: whatever waits at a fixed name
    # (a FIFO, a link) is not written to.
    replace_file(path, json.dumps(body).encode("utf-8"))


def read(path: Path) -> tuple[ConditionalRatios, int]:
    """(the ratios, when they were computed); ValueError naming the problem for a file that is not
    one of ours, OSError when it cannot be read or is no regular file (a FIFO would hang the guard)."""
    body = read_json(path, MAX_BYTES)
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ValueError(f"{path}: not an extension file of format {FORMAT}")
    if body.get("bins_per_decade") != ConditionalRatios.BINS_PER_DECADE:
        raise ValueError(f"{path}: bins_per_decade {body.get('bins_per_decade')!r} is not ours")
    computed = body.get("computed")
    # A time time.ctime() can print: 10**400 would raise OverflowError in the guard's log line.
    if type(computed) is not int or not 0 <= computed < MAX_COMPUTED:
        raise ValueError(f"{path}: no computed time")
    return ConditionalRatios.from_counts(body.get("counts")), computed
