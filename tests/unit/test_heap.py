"""server.heap: settle freezes what survives; the history and the models hold no reference cycles,
so freezing them keeps nothing that should go; the history feed and the daemon settle as they grow."""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from benchmarks.bench_gc_pause import NOW, jobs
from slurm_harp.accounting.jobstore import JobStore
from slurm_harp.config import HistorySettings, parse
from slurm_harp.core.features import FEATURE_NAMES
from slurm_harp.core.history import HistoryIndex
from slurm_harp.core.request import Target
from slurm_harp.model.runtime import QuantileModel
from slurm_harp.model.store import ModelStore
from slurm_harp.server import heap
from slurm_harp.server.daemon import Daemon
from slurm_harp.server.history_feed import HistoryFeed


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector off (only reference counting frees), and as it was afterwards."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def test_settle_freezes_the_survivors(collector: None) -> None:
    kept = [[i] for i in range(1000)]
    assert heap.settle() >= 0.0
    assert gc.get_freeze_count() >= len(kept)
    walked = {id(x) for x in gc.get_objects()}  # what a collection walks: not the frozen
    assert id(kept) not in walked and id(kept[0]) not in walked


def test_settle_never_walks_the_frozen_objects(collector: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # gc.get_freeze_count() walks the whole permanent generation: with a large history, longer
    # than the collection itself (benchmarks/bench_gc_pause.py, "settle max ms").
    def walks() -> int:
        raise AssertionError("settle walked the frozen objects")

    monkeypatch.setattr(gc, "get_freeze_count", walks)
    heap.settle()


def test_a_dropped_history_is_freed_without_the_collector(collector: None) -> None:
    index = HistoryIndex()
    for record in jobs(3000, 0, random.Random(2)):
        index.add(record)
    assert len(index) > 1000
    index.expire(NOW + 400 * 86400)  # every key expired: dropped from the index
    del index
    assert gc.collect() == 0  # nothing was left for the collector: no cycles


def test_a_replaced_model_is_freed_without_the_collector(trained_store: Path, collector: None) -> None:
    directory = ModelStore(trained_store).current_dir(Target.TIME)
    assert directory is not None
    model = QuantileModel.load(directory)
    assert model._row_runs and model._ladder is not None
    model._raw(model.names[0], np.zeros((1, len(FEATURE_NAMES)), dtype=np.float32))  # binds buffers
    gone = weakref.ref(model)
    del model
    assert gone() is None


def test_the_feed_settles_as_it_reads_and_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "RECORDS_PER_SETTLE", 2)
    path = tmp_path / "jobs.sqlite"
    with JobStore(path) as store:
        store.merge(list(jobs(7, 0, random.Random(3))), "sacct")
    calls: list[int] = []
    feed = HistoryFeed(HistorySettings(db=path, poll_seconds=60), clock=lambda: float(NOW))
    feed.settle = lambda: calls.append(1)
    with JobStore(path) as store:
        feed.refresh(store)
    assert feed.rebuilds == 1 and feed.index.added == 7
    assert len(calls) == 6  # 7 records read, then 7 added: every second one


def test_the_daemon_settles_after_loading_models(trained_store: Path, tmp_path: Path) -> None:
    calls: list[int] = []
    settings = parse(
        {
            "store": {"path": str(trained_store)},
            "history": {"db": str(tmp_path / "jobs.sqlite")},
        }
    )
    daemon = Daemon(settings, CollectorRegistry(), settle=lambda: calls.append(1))
    assert daemon.history is not None and daemon.history.settle is not None
    daemon.reload_models()
    assert calls == [1]
