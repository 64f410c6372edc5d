"""The site's partitions as the daemon reads them for the advice: each scontrol record's billing
(partition_table) and shape (partition_shape), one record at a time, with the memory a job may hold
of one of its nodes where ``scontrol show node`` gave it (slurm_formats.node_memory_mb).

A record that does not read (a field Slurm printed in a form not known here) costs that partition
alone: it keeps its last good reading of sizes, limits and billing if it had one (whom it takes
jobs from is read again: those fields always read), and is otherwise left out of the advice, whose
note then says it could not be read rather than that the site has no such partition. Read as one
text, one odd record cost the advice every partition (none at all at the daemon's start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from slurm_harp.advice.default_account import DefaultAccounts
from slurm_harp.advice.partition_access import PartitionAccess
from slurm_harp.advice.partition_shape import PartitionShape, shape_of
from slurm_harp.advice.partition_table import Partition, PartitionTable, mode_of, partition_of
from slurm_harp.slurm_formats import scontrol_records

__all__ = ["SitePartitions", "Unread"]


@dataclass(frozen=True, slots=True)
class Unread:
    """A partition whose record did not read this time."""

    why: str  # the field that did not read, and how
    access: PartitionAccess  # whom it takes jobs from, read from that record all the same


@dataclass(frozen=True, slots=True)
class SitePartitions:
    table: PartitionTable = field(default_factory=PartitionTable)
    shapes: Mapping[str, PartitionShape] = field(default_factory=dict)
    # the records that did not read this time, by partition (one read well before keeps that
    # reading's sizes and billing in table and shapes)
    unread: Mapping[str, Unread] = field(default_factory=dict)
    # the account a job naming none is given, which AllowAccounts and DenyAccounts admit it by
    default_accounts: DefaultAccounts = field(default_factory=DefaultAccounts)

    @classmethod
    def read(
        cls,
        partitions_text: str,
        config_text: str = "",
        last: SitePartitions | None = None,
        node_mem_mb: Mapping[str, int] | None = None,
    ) -> SitePartitions:
        """The partitions of ``scontrol show partition`` text and the billing mode of ``scontrol
        show config``'s; a record that does not read takes its sizes and billing from ``last``.
        ``node_mem_mb``: by partition, what a job may hold of one node (node_memory_mb)."""
        node_mem_mb = node_mem_mb or {}
        last = last or cls()
        table: dict[str, Partition] = {}
        shapes: dict[str, PartitionShape] = {}
        unread: dict[str, Unread] = {}
        for block in scontrol_records(partitions_text, "PartitionName"):
            name = block["PartitionName"]
            try:
                table[name], shapes[name] = partition_of(block), shape_of(block)
                if name in node_mem_mb:
                    shapes[name] = replace(shapes[name], node_mem_mb=float(node_mem_mb[name]))
            except ValueError as exc:
                access = PartitionAccess.of(block)
                unread[name] = Unread(str(exc), access)
                table.pop(name, None)
                shapes.pop(name, None)
                if name in last.shapes and name in last.table.partitions:
                    table[name] = last.table.partitions[name]
                    shapes[name] = replace(last.shapes[name], access=access)  # a partition closed since
        return cls(PartitionTable(table, mode_of(config_text)), shapes, unread)
