"""Keeps Python's garbage collector from stopping the submission path for long.

A full collection walks every object the collector tracks, holding the interpreter meanwhile: with
a large job history (the index keeps three tracked objects per key, up to a million keys) that is
hundreds of milliseconds, far past the plugin's deadline, and the Predict call that falls in it
fails open while slurmctld waits (benchmarks/bench_gc_pause.py). CPython starts one whenever the
objects that survived since the last full collection outnumber a quarter of the older ones: every
seeding or rebuild of the history does, and so does its steady growth.

``settle`` collects what is not frozen yet, then freezes the survivors (``gc.freeze``: they move to
a permanent generation that collections skip). Called after every chunk of history read or built,
full collections then walk at most what was allocated since the last call. Nothing is kept that
should go: the history index, the job records, the models and Predict calls (good or unreadable)
leave no reference cycles (tests/unit/test_heap.py, tests/integration/test_heap_serving.py), so
whatever of them is dropped later is freed by reference counting, frozen or not. Only ``harp
serve`` settles: a test process keeps the collector as it is.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

log = logging.getLogger(__name__)

# Objects allocated between two settles while the history is read or built: each settle's
# collection walks about this many records' objects (a few milliseconds at most).
RECORDS_PER_SETTLE = 5_000

T = TypeVar("T")


def settle() -> float:
    """Collect the objects not frozen yet, freeze the survivors; returns the seconds it took."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - started
    # Not gc.get_freeze_count(): it walks every frozen object, longer than the collection.
    log.debug("heap settled in %.1f ms", took * 1e3)
    return took


def settling(items: Iterable[T], settle: Callable[[], object] | None) -> Iterator[T]:
    """``items`` one by one, calling ``settle`` (None: nothing) after every RECORDS_PER_SETTLE of
    them: a burst of new objects would otherwise make the collector walk all of them at once."""
    for i, item in enumerate(items, 1):
        yield item
        if settle is not None and i % RECORDS_PER_SETTLE == 0:
            settle()
