"""The job store's columns: one per JobRecord field and one per JobRequest field, flattened under
the same names, and the mapping between a JobRecord and a row of them.

A field added to either dataclass becomes a column of its SQLite type (nullable when the field may
be None); a reader meeting an older database reads the missing column as NULL, and the field's
default applies.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from slurm_harp.core.job import JobRecord
from slurm_harp.core.request import JobRequest

SQL_TYPES: dict[type, str] = {str: "TEXT", int: "INTEGER", float: "REAL", bool: "INTEGER"}
# What SQLite may give back for each kind of column (a REAL column keeps a whole number as REAL,
# but an expression or an older release may have stored an INTEGER there). SQLite's columns hold
# any type: text written over a number by hand comes back as text, and would only fail far away.
_READS_AS: dict[type, tuple[type, ...]] = {str: (str,), int: (int,), float: (float, int), bool: (int,)}
_KIND_NAME = {str: "text", int: "a whole number", float: "a number", bool: "0 or 1"}
_TYPEOF = {str: "text", int: "integer", float: "real"}  # SQLite's typeof() of each Python type read


@dataclass(frozen=True)
class Column:
    name: str
    kind: type  # str, int, float or bool
    optional: bool  # the field may be None
    in_request: bool  # a JobRequest field, else a JobRecord field

    @property
    def definition(self) -> str:
        return f"{self.name} {SQL_TYPES[self.kind]}{'' if self.optional else ' NOT NULL'}"


class BadValue(ValueError):
    """A stored value not of its column's type: ``job_id`` (as stored), ``column`` and ``value``."""

    def __init__(self, job_id: object, column: Column, value: object) -> None:
        super().__init__(f"job {job_id!r:.40}: {column.name} = {value!r:.40}, not {_KIND_NAME[column.kind]}")
        self.job_id, self.column, self.value = job_id, column.name, value


def _columns_of(cls: type, in_request: bool) -> list[Column]:
    hints = typing.get_type_hints(cls)
    out = []
    for item in dataclasses.fields(cls):
        if item.name == "request":
            continue
        hint = hints[item.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = isinstance(hint, types.UnionType) and len(args) == 1
        kind = args[0] if optional else hint
        if kind not in SQL_TYPES:
            raise TypeError(f"{cls.__name__}.{item.name}: no SQLite column type for {hint!r}")
        out.append(Column(item.name, kind, optional, in_request))
    return out


COLUMNS: tuple[Column, ...] = (*_columns_of(JobRecord, False), *_columns_of(JobRequest, True))
# Every column but the key's job_id (the other part of the key, source, is not a field).
DATA_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.name != "job_id")
if len({c.name for c in COLUMNS} | {"source", "ingested_at"}) != len(COLUMNS) + 2:
    raise TypeError("JobRecord and JobRequest field names must be distinct (one flat jobs table)")
if COLUMNS[0].name != "job_id":
    raise TypeError("JobRecord's first field must be job_id: a bad row is named by it")


def select_sql(present: set[str]) -> str:
    """``SELECT`` of every column from ``jobs``, given the columns the table has now."""
    # A reader may meet a store the harvester has not migrated yet: a newer column reads as NULL.
    names = [c.name if c.name in present else f"NULL AS {c.name}" for c in COLUMNS]
    return f"SELECT {', '.join(names)} FROM jobs"


def readable_sql(present: set[str]) -> str:
    """An SQL condition true of exactly the rows record_of reads without BadValue, given the columns
    the table has: a query that counts rows counts none that every reader skips."""
    return " AND ".join(
        f"typeof({c.name}) IN ('null', {', '.join(repr(_TYPEOF[kind]) for kind in _READS_AS[c.kind])})"
        for c in COLUMNS
        if c.name in present
    )


def _known(column: Column, value: Any) -> Any:
    """``value``, or None (unknown) for an infinite number in a column that may be NULL. SQLite
    stores NaN as NULL itself; an infinity it keeps, and the history features, training and MAX()
    on a re-read (which then could never lower it) all choke on one."""
    if column.optional and isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def not_finite(record: JobRecord) -> list[str]:
    """The fields of ``record`` that row_of stores as unknown because they are not finite."""
    return [
        c.name
        for c in COLUMNS
        if (value := getattr(record.request if c.in_request else record, c.name)) is not None
        and _known(c, value) is None
    ]


def row_of(record: JobRecord) -> tuple[Any, ...]:
    """job_id, then the DATA_NAMES columns' values of ``record`` (an infinite number as None)."""
    out: list[Any] = []
    for column in COLUMNS:
        if column.name == "job_id":
            continue
        value = _known(column, getattr(record.request if column.in_request else record, column.name))
        out.append(int(value) if column.kind is bool and value is not None else value)
    return (record.job_id, *out)


def record_of(row: tuple[Any, ...]) -> JobRecord:
    """The JobRecord of a row selected by select_sql (an infinite number, stored by an older
    release, read as None). BadValue for a value not of its column's type (a store edited by hand)."""
    own: dict[str, Any] = {}
    request: dict[str, Any] = {}
    for column, value in zip(COLUMNS, row, strict=True):
        if value is None and not column.optional:
            continue  # a column added to an older database: the field's default applies
        if value is not None and type(value) not in _READS_AS[column.kind]:
            raise BadValue(row[0], column, value)  # job_id is the first column
        if column.kind is bool and value is not None:
            value = bool(value)
        (request if column.in_request else own)[column.name] = _known(column, value)
    return JobRecord(request=JobRequest(**request), **own)
