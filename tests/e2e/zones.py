"""Time zones for end-to-end tests of harp's tools around a change of the clocks."""

from __future__ import annotations

import time


def zone_falling_back_at(at: int) -> str:
    """A POSIX TZ value far from UTC whose clocks go back an hour at unix time ``at``, so that local
    times in the hour after ``at`` were shown once already. Summer time runs from 1 January (day 0)
    to ``at``, given as the summer wall clock; of two offsets (+5:30, +6:30 in summer; -6, -5), one
    whose wall clock at ``at`` is far from midnight, where the rule's day would be ambiguous."""
    for std_hours, names in ((5.5, "HRS-5:30HRD-6:30"), (-6.0, "HRS6HRD5")):
        summer = time.gmtime(at + int((std_hours + 1) * 3600))
        if 2 <= summer.tm_hour < 22:
            day, clock = summer.tm_yday - 1, time.strftime("%H:%M:%S", summer)
            return f"{names},0/0,{day}/{clock}"
    raise AssertionError("one of the offsets keeps the wall clock at the change away from midnight")
