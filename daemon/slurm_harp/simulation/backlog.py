"""EASY's waiting jobs indexed by width, so that a backfill scan over a long queue touches only the
jobs that may start.

EASY may start a waiting job now if it fits in the free processors and either ends by the head
job's reservation (with its shortest limit: its time_min floor, if it has one) or needs no more
than the processors the reservation leaves spare. Both thresholds only fall during a scan, so a job
that fails once fails for the rest of it, and the scan's next start is the first job, in the scan's
order, that passes now. ``Backlog.first`` finds it from per-width buckets: O(distinct widths) per
start instead of O(queue) per scan, which is what an overloaded trace (tens of thousands waiting,
a few processors free) spends its time on.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

# A job's place in the scan's order: (arrival rank, job) in queue order, (planned limit, job) in
# shortest-first order. The job is the last item.
Key = tuple[float, int]


class _Bucket:
    """The waiting jobs of one width: their keys sorted, and their shortest limits sorted with the
    keys alongside."""

    __slots__ = ("floor_keys", "floors", "keys")

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.floors: list[float] = []
        self.floor_keys: list[Key] = []


class Backlog:
    """Waiting jobs by width (see the module docstring)."""

    __slots__ = ("_buckets", "_jobs", "_widths")

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._widths: list[int] = []  # the widths with a waiting job, ascending
        self._jobs: dict[int, tuple[int, Key, float]] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: int, width: int, key: Key, shortest: float) -> None:
        bucket = self._buckets.get(width)
        if bucket is None:
            bucket = self._buckets[width] = _Bucket()
            insort(self._widths, width)
        insort(bucket.keys, key)
        at = bisect_right(bucket.floors, shortest)
        bucket.floors.insert(at, shortest)
        bucket.floor_keys.insert(at, key)
        self._jobs[job] = (width, key, shortest)

    def remove(self, job: int) -> tuple[int, Key, float]:
        """Take ``job`` out; what ``add`` would need to put it back."""
        entry = width, key, shortest = self._jobs.pop(job)
        bucket = self._buckets[width]
        del bucket.keys[bisect_left(bucket.keys, key)]
        at = bucket.floor_keys.index(key, bisect_left(bucket.floors, shortest))
        del bucket.floors[at]
        del bucket.floor_keys[at]
        if not bucket.keys:
            del self._buckets[width]
            self._widths.remove(width)
        return entry

    def first(self, free: int, extra: int, slack: float) -> int | None:
        """The first job in the scan's order that is at most ``free`` wide and either at most
        ``extra`` wide or has a shortest limit of at most ``slack``; None if there is none."""
        best: Key | None = None
        buckets = self._buckets
        for width in self._widths:
            if width > free:
                break
            bucket = buckets[width]
            if width <= extra:
                key = bucket.keys[0]
            else:
                n = bisect_right(bucket.floors, slack)
                if not n:
                    continue
                key = min(bucket.floor_keys[:n]) if n > 1 else bucket.floor_keys[0]
            if best is None or key < best:
                best = key
        return None if best is None else best[-1]
