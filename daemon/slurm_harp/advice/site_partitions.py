"""The site's partitions as the daemon reads them for the advice: each scontrol record's billing
(partition_table) and shape (partition_shape), one record at a time.

A record that does not read (a field Slurm printed in a form not known here) costs that partition
alone: it keeps its last good reading if it had one, and is otherwise left out of the advice, whose
note then says it could not be read rather than that the site has no such partition. Read as one
text, one odd record cost the advice every partition (none at all at the daemon's start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_harp.advice.partition_shape import PartitionShape, shape_of
from slurm_harp.advice.partition_table import Partition, PartitionTable, mode_of, partition_of
from slurm_harp.slurm_formats import scontrol_records

__all__ = ["SitePartitions"]


@dataclass(frozen=True, slots=True)
class SitePartitions:
    table: PartitionTable = field(default_factory=PartitionTable)
    shapes: Mapping[str, PartitionShape] = field(default_factory=dict)
    # the records that did not read this time: name -> what could not be read (a partition read
    # well before keeps that reading in table and shapes)
    unread: Mapping[str, str] = field(default_factory=dict)

    @property
    def unreadable(self) -> Mapping[str, str]:
        """The partitions scontrol lists that are known by name alone: no reading of theirs read."""
        return {name: why for name, why in self.unread.items() if name not in self.shapes}

    @classmethod
    def read(
        cls, partitions_text: str, config_text: str = "", last: SitePartitions | None = None
    ) -> SitePartitions:
        """The partitions of ``scontrol show partition`` text and the billing mode of ``scontrol
        show config``'s; a record that does not read takes its entries from ``last``, if any."""
        last = last or cls()
        table: dict[str, Partition] = {}
        shapes: dict[str, PartitionShape] = {}
        unread: dict[str, str] = {}
        for block in scontrol_records(partitions_text, "PartitionName"):
            name = block["PartitionName"]
            try:
                table[name], shapes[name] = partition_of(block), shape_of(block)
            except ValueError as exc:
                unread[name] = str(exc)
                table.pop(name, None)
                shapes.pop(name, None)
                if name in last.shapes and name in last.table.partitions:
                    table[name], shapes[name] = last.table.partitions[name], last.shapes[name]
        return cls(PartitionTable(table, mode_of(config_text)), shapes, unread)
