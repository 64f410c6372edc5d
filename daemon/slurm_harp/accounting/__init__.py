"""Accounting readers: sacct -P text, SWF traces and the Eagle CSV, all into JobRecords."""

from __future__ import annotations

from pathlib import Path

from slurm_harp.accounting.bounded_lines import bounded_lines
from slurm_harp.accounting.csv_trace import read_csv_trace
from slurm_harp.accounting.read_stats import ReadStats
from slurm_harp.accounting.sacct import read_sacct
from slurm_harp.accounting.sacct_runner import SACCT_FIELDS, harvest_sacct
from slurm_harp.accounting.swf import read_swf, swf_processors
from slurm_harp.core.job import JobRecord
from slurm_harp.core.text import question_marks

__all__ = [
    "SACCT_FIELDS",
    "JobRecord",
    "ReadStats",
    "harvest_sacct",
    "load_records",
    "read_csv_trace",
    "read_sacct",
    "read_swf",
    "swf_processors",
]


def load_records(
    source: str | Path, stats: ReadStats | None = None, *, delimiter: str | None = None
) -> list[JobRecord]:
    """Read a file by its suffix: .swf / .swf.gz, .csv, anything else is `sacct -P` text.
    ``delimiter``: the one sacct text was saved with, if no user could know it (None: its header's,
    "|" or the unit separator: a row split over lines ends what is read, sacct_lines.split_rows)."""
    path = Path(source)
    stats = stats if stats is not None else ReadStats(source=str(path))
    name = path.name.lower()
    is_sacct = not name.endswith((".swf", ".swf.gz", ".csv"))
    if delimiter is not None and not is_sacct:
        raise ValueError(f"{path}: a delimiter is for saved sacct text, not an SWF or CSV trace")
    if name.endswith((".swf", ".swf.gz")):
        return read_swf(path, stats)
    if name.endswith(".csv"):
        return read_csv_trace(path, stats)
    # Each byte that is not UTF-8 as "?", and lines split at "\n" alone, as the harvest reads
    # sacct's output: sacct prints a "\r" in a job name as it is, and read as a line end it split
    # the row (the row and every one after it bad). A CRLF's "\r" is stripped by the splitter.
    with path.open(encoding="utf-8", errors="surrogateescape", newline="\n") as handle:
        lines = (question_marks(line) for line in bounded_lines(handle, stats))
        return read_sacct(lines, stats, delimiter=delimiter)
