"""Fixtures that start real Slurm clusters (see cluster.py).

Policy: a machine that cannot host a cluster at all (not root, Slurm/munge/MariaDB missing) skips the
e2e tests, unless HARP_REQUIRE_CLUSTER=1 (set in CI), where that is a failure. Any other start
failure is always a failure: it is a bug in the cluster setup or in what a test configured.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import MAX_BASE_DIR_CHARS, ClusterError, ClusterUnavailable, SlurmCluster, StartCluster

E2E_DIR = Path(__file__).parent
REQUIRE_ENV = "HARP_REQUIRE_CLUSTER"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test under tests/e2e needs a real cluster: mark it so `-m "not e2e"` deselects it.
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)


def _base_dir(factory: pytest.TempPathFactory, name: str, public: bool = False) -> Path:
    if public:
        # Ordinary users must reach slurm.conf and munge's socket; pytest's own tree is 0700.
        path = Path(tempfile.mkdtemp(prefix=f"harp-{name}-"))
        path.chmod(0o755)
        return path
    path = factory.mktemp(name)
    if len(str(path)) <= MAX_BASE_DIR_CHARS:
        return path
    # A long --basetemp would overflow Unix socket paths under it.
    return Path(tempfile.mkdtemp(prefix=f"harp-{name}-"))


def _launch(factory: pytest.TempPathFactory, name: str, public: bool = False, **kwargs: Any) -> SlurmCluster:
    """``public=True``: a base directory other users can traverse (for submissions as another user)."""
    cluster = SlurmCluster(_base_dir(factory, name, public), **kwargs)
    try:
        cluster.start()
    except ClusterUnavailable as exc:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but this machine cannot run a Slurm cluster: {exc}", pytrace=False)
        pytest.skip(f"no Slurm cluster on this machine: {exc}")
    except ClusterError as exc:
        pytest.fail(f"Slurm cluster failed to start under {cluster.base_dir}:\n{exc}", pytrace=False)
    return cluster


def _shutdown(cluster: SlurmCluster) -> None:
    cluster.stop()
    # The database is the bulk of the directory and never needed after the run; logs stay for debugging.
    shutil.rmtree(cluster.mysql_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """One cluster without job_submit plugin, shared by the whole session (filter sacct by job id)."""
    cluster = _launch(tmp_path_factory, "slurm")
    try:
        yield cluster
    finally:
        _shutdown(cluster)


def _factory(factory: pytest.TempPathFactory) -> Iterator[StartCluster]:
    clusters: list[SlurmCluster] = []

    def start(**kwargs: Any) -> SlurmCluster:
        cluster = _launch(factory, "slurm", **kwargs)
        clusters.append(cluster)
        return cluster

    try:
        yield start
    finally:
        for cluster in clusters:
            _shutdown(cluster)


@pytest.fixture
def start_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartCluster]:
    """Factory: ``start_cluster(job_submit_lua=..., nodes=...)``; clusters stop at the end of the test."""
    yield from _factory(tmp_path_factory)


@pytest.fixture(scope="module")
def start_module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartCluster]:
    """Like ``start_cluster`` but the clusters live until the end of the test module."""
    yield from _factory(tmp_path_factory)
