"""Free processors over future time: a step function kept as sorted breakpoints.

``times[i]`` starts a segment that lasts until ``times[i + 1]`` (the last one forever) during which
``free[i]`` processors are free. Searching it is one forward walk (a failed window restarts past the
segment that broke it), so a query costs O(breakpoints) at worst; insertion uses bisect.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable


class FreeProfile:
    """Free processors from ``now`` on, given what is free now and when running jobs release theirs."""

    __slots__ = ("free", "times", "zero_at")

    def __init__(self, now: float, free_now: int, releases: Iterable[tuple[float, int]]) -> None:
        times = [now]
        free = [free_now]
        for when, procs in sorted(releases):
            # A running job at or past its planned end (one started with a time_min that nothing
            # raised) still holds its processors now, its end not yet come (ends are handled before
            # a pass at the same instant): they are free just after, never at ``now``.
            at = when if when > now else math.nextafter(now, math.inf)
            if at == times[-1]:
                free[-1] += procs
            else:
                times.append(at)
                free.append(free[-1] + procs)
        self.times = times
        self.free = free
        # The first time no processor is free (reservations only ever move it earlier): no job
        # longer than zero_at - now can start now, whatever its width.
        self.zero_at = now if free_now == 0 else float("inf")

    def earliest(
        self, procs: int, duration: float, horizon: float = float("inf"), not_before: float | None = None
    ) -> float | None:
        """The earliest start at which ``procs`` stay free for ``duration``; None past ``horizon``.
        ``not_before``: a start known to be no earlier (the search begins at its segment)."""
        times, free = self.times, self.free
        n = len(times)
        i = 0 if not_before is None else max(0, bisect_right(times, not_before) - 1)
        while i < n:
            if free[i] < procs:
                i += 1
                continue
            start = times[i]
            if start >= horizon:
                return None
            end = start + duration
            j = i + 1
            while j < n and times[j] < end:
                if free[j] < procs:
                    break
                j += 1
            else:
                return start
            i = j + 1
        return None

    def reserve(self, start: float, end: float, procs: int) -> None:
        """Take ``procs`` processors over [start, end) (the caller has checked they are free)."""
        first = self._breakpoint(start)
        last = self._breakpoint(end)
        free, times = self.free, self.times
        for i in range(first, last):
            free[i] -= procs
            if free[i] == 0 and times[i] < self.zero_at:
                self.zero_at = times[i]

    def _breakpoint(self, when: float) -> int:
        """The index of the segment starting at ``when``, splitting the segment that holds it."""
        times = self.times
        i = bisect_right(times, when) - 1
        if i >= 0 and times[i] == when:
            return i
        # when >= times[0] always (starts are searched from now on): split segment i.
        times.insert(i + 1, when)
        self.free.insert(i + 1, self.free[i])
        return i + 1
