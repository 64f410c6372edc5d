"""EASY's waiting jobs indexed by width, so that a backfill scan over a long queue touches only the
jobs that may start.

EASY may start a waiting job now if it fits in the free processors and either ends by the head
job's reservation (with its shortest limit: its time_min floor, if it has one) or needs no more
than the processors the reservation leaves spare. Both thresholds only fall during a scan, so a job
that fails once fails for the rest of it, and the scan's next start is the first job, in the scan's
order, that passes now. ``Backlog.first`` finds it from per-width buckets, each in blocks of
``BLOCK`` jobs that know their shortest limit: per start, a look at each width that fits and a walk
over the blocks of those that need a short job, instead of a look at every waiting job per scan,
which is what an overloaded trace (tens of thousands waiting, a few processors free) spent its time
on.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

# A job's place in the scan's order: (arrival rank, job) in queue order, (planned limit, job) in
# shortest-first order. The job is the last item.
Key = tuple[float, int]


# Jobs per block of a bucket (a block splits in two at twice that).
BLOCK = 64


class _Bucket:
    """The waiting jobs of one width in scan order, in blocks that know their shortest limit: the
    first job short enough is found by walking the blocks, then inside the first that has one."""

    __slots__ = ("blocks", "firsts", "limits", "lowest")

    def __init__(self) -> None:
        self.blocks: list[list[Key]] = []  # keys, in order
        self.limits: list[list[float]] = []  # each key's shortest limit, alongside
        self.firsts: list[Key] = []  # each block's first key
        self.lowest: list[float] = []  # each block's shortest limit

    def add(self, key: Key, shortest: float) -> None:
        if not self.blocks:
            self.blocks.append([key])
            self.limits.append([shortest])
            self.firsts.append(key)
            self.lowest.append(shortest)
            return
        i = max(0, bisect_right(self.firsts, key) - 1)
        keys, limits = self.blocks[i], self.limits[i]
        at = bisect_left(keys, key)
        keys.insert(at, key)
        limits.insert(at, shortest)
        self.firsts[i] = keys[0]
        self.lowest[i] = min(self.lowest[i], shortest)
        if len(keys) > 2 * BLOCK:
            self.blocks[i : i + 1] = [keys[:BLOCK], keys[BLOCK:]]
            self.limits[i : i + 1] = [limits[:BLOCK], limits[BLOCK:]]
            self.firsts[i : i + 1] = [keys[0], keys[BLOCK]]
            self.lowest[i : i + 1] = [min(limits[:BLOCK]), min(limits[BLOCK:])]

    def remove(self, key: Key, shortest: float) -> None:
        i = bisect_right(self.firsts, key) - 1
        keys, limits = self.blocks[i], self.limits[i]
        at = bisect_left(keys, key)
        del keys[at]
        del limits[at]
        if not keys:
            del self.blocks[i], self.limits[i], self.firsts[i], self.lowest[i]
            return
        self.firsts[i] = keys[0]
        if shortest == self.lowest[i]:
            self.lowest[i] = min(limits)

    def first_short(self, slack: float) -> Key | None:
        """The first key whose shortest limit is at most ``slack``."""
        for i, lowest in enumerate(self.lowest):
            if lowest <= slack:
                for key, shortest in zip(self.blocks[i], self.limits[i], strict=True):
                    if shortest <= slack:
                        return key
        return None


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
        bucket.add(key, shortest)
        self._jobs[job] = (width, key, shortest)

    def remove(self, job: int) -> tuple[int, Key, float]:
        """Take ``job`` out; what ``add`` would need to put it back."""
        entry = width, key, shortest = self._jobs.pop(job)
        bucket = self._buckets[width]
        bucket.remove(key, shortest)
        if not bucket.blocks:
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
                key = bucket.firsts[0]
            else:
                found = bucket.first_short(slack)
                if found is None:
                    continue
                key = found
            if best is None or key < best:
                best = key
        return None if best is None else best[-1]
