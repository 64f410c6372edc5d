"""What Slurm's client commands print, parsed: sacct's delimited rows and ``scontrol show`` records.

Both keep free text whole: sacct rows are split on a delimiter no comment contains, and scontrol's
free-text fields, which may contain spaces, stay one value.
"""

from __future__ import annotations

import re

from tests.e2e.cluster_host import ClusterError

# sacct -P separates with "|", which a free-text comment may contain.
SACCT_DELIMITER = "\x1f"


def parse_sacct_rows(text: str, fields: list[str]) -> list[dict[str, str]]:
    """``sacct -P -n --delimiter=SACCT_DELIMITER`` output as rows keyed by the field names as given."""
    rows = []
    for line in text.splitlines():
        if not line:
            continue
        values = line.split(SACCT_DELIMITER)
        if len(values) != len(fields):
            raise ClusterError(f"sacct row has {len(values)} fields, wanted {len(fields)}: {line!r}")
        rows.append(dict(zip(fields, values, strict=True)))
    return rows


def parse_scontrol_record(text: str) -> dict[str, str]:
    """Parse one ``scontrol show`` record.

    Fields are ``Key=Value`` separated by spaces, except that scontrol prints free-text fields (which
    may contain spaces) alone on their line: such a line becomes one field.
    """
    record: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if sep and key in _FREE_TEXT_KEYS:
            record[key] = value
            continue
        for token in re.split(r" (?=[A-Za-z][\w:/.\-]*=)", line):
            k, sep, v = token.partition("=")
            if sep:
                record[k] = v
    return record


_FREE_TEXT_KEYS = frozenset(
    {"Comment", "AdminComment", "Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Reason", "SystemComment"}
)
