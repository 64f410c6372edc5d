"""A model no longer in the configured store stops serving: a target whose CURRENT an admin
removed, and every model of the store a reload moved `[store] path` away from. Before, the reload
started from the models serving, so both kept serving, listed in harp_model_info, unlike after a
restart."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from slurm_harp.config import load, parse
from slurm_harp.core.decision import Reason
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.model.store import ModelStore
from slurm_harp.server.daemon import Daemon
from tests.conftest import REPO, for_target

REFERENCE = REPO / "models" / "reference"
JOB = JobRequest(user_name="u5", time_limit_minutes=1440, min_cpus=32, submit_time=850_000_000)


def _reason(daemon: Daemon) -> Reason:
    decision = for_target(daemon.predictor.decide(JOB), Target.TIME)
    assert decision is not None
    return decision.reason


def _listed(daemon: Daemon, version: str) -> float | None:
    return daemon.registry.get_sample_value("harp_model_info", {"target": "time", "version": version})


def _copy_as(store: Path, version: str, name: str) -> None:
    """A copy of time's ``version`` published under ``name``."""
    copy = Path(shutil.copytree(store / "time" / version, store / "time" / name))
    (copy / "card.json").write_text((copy / "card.json").read_text().replace(version, name))


def test_a_target_whose_current_is_removed_is_no_longer_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = Path(shutil.copytree(REFERENCE, tmp_path / "store"))
    registry = CollectorRegistry()
    daemon = Daemon(parse({"store": {"path": str(root)}}), registry)
    daemon.reload_models()
    version = daemon.predictor.models[Target.TIME].version
    assert _reason(daemon) is not Reason.NO_MODEL and _listed(daemon, version) == 1
    (root / "time" / "CURRENT").unlink()  # withdrawn by an admin, then its directory too
    caplog.set_level(logging.INFO)
    daemon.poll_store()  # the poll notices it: no SIGHUP needed
    assert Target.TIME not in daemon.predictor.models
    assert _reason(daemon) is Reason.NO_MODEL and _listed(daemon, version) is None
    said = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in said] == [f"time: no CURRENT in {root}; no longer serving {version}"]
    shutil.rmtree(root / "time")
    daemon.reload()  # a SIGHUP: still nothing, said once
    assert _reason(daemon) is Reason.NO_MODEL and len(caplog.records) == len(said) + 1


@pytest.mark.parametrize("moved_to", ["a-store-without-time", "a-store-whose-current-does-not-load"])
def test_a_reload_to_another_store_carries_none_of_the_old_stores_models(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, moved_to: str
) -> None:
    """`harp serve` applies a `[store]` change at a SIGHUP: the new store's models serve as after a
    restart, its fallback at start for a CURRENT that does not load included."""
    old = Path(shutil.copytree(REFERENCE, tmp_path / "old"))
    new = tmp_path / "new"
    (version,) = ModelStore(old).versions(Target.TIME)
    conf = tmp_path / "harp.toml"
    conf.write_text(f'[store]\npath = "{old}"\n')
    daemon = Daemon(load(conf), CollectorRegistry())
    daemon.reload_models()
    assert daemon.predictor.models[Target.TIME].version == version
    new.mkdir()
    fallback = None
    if moved_to == "a-store-whose-current-does-not-load":
        shutil.copytree(REFERENCE / "time", new / "time")
        fallback, broken = "20261101T000000.000000Z", "20261201T000000.000000Z"
        _copy_as(new, version, fallback)
        _copy_as(new, version, broken)
        next((new / "time" / broken).glob("*.onnx")).write_bytes(b"not onnx")
        shutil.rmtree(new / "time" / version)
        ModelStore(new).set_current(Target.TIME, broken)
    conf.write_text(f'[store]\npath = "{new}"\n')
    caplog.set_level(logging.INFO)
    daemon.reload()
    assert daemon.settings.store == new
    if fallback is None:
        assert _reason(daemon) is Reason.NO_MODEL and daemon.predictor.models == {}
    else:
        assert daemon.predictor.models[Target.TIME].version == fallback
        assert _listed(daemon, fallback) == 1
    assert _listed(daemon, version) is None
    assert f"model store moved from {old} to {new}: loading it as at a start" in caplog.text


@pytest.mark.parametrize("outage", ["store root gone", "empty mountpoint", "target directory gone"])
def test_a_store_gone_for_a_while_is_no_withdrawal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, outage: str
) -> None:
    """The review: a store unmounted (or a target's directory gone in a restore) reads as no CURRENT
    as well; taken for a withdrawal, every model stopped serving. Only CURRENT removed from a
    directory still there withdraws; otherwise the last good model keeps serving, logged."""
    root = Path(shutil.copytree(REFERENCE, tmp_path / "store"))
    daemon = Daemon(parse({"store": {"path": str(root)}}), CollectorRegistry())
    daemon.reload_models()
    version = daemon.predictor.models[Target.TIME].version
    away = tmp_path / "away"
    gone = root if outage != "target directory gone" else root / "time"
    gone.rename(away)
    if outage == "empty mountpoint":
        root.mkdir()
    daemon.poll_store()
    daemon.reload()
    assert daemon.predictor.models[Target.TIME].version == version and _listed(daemon, version) == 1
    assert f"time: {root / 'time'} is not there; serving {version} (to withdraw it, remove" in caplog.text
    assert "no longer serving" not in caplog.text
    if outage == "empty mountpoint":
        root.rmdir()
    away.rename(gone)
    daemon.poll_store()
    assert daemon.predictor.models[Target.TIME].version == version
