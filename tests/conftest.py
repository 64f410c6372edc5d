from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLED_TRACE = REPO / "daemon" / "slurm_harp" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"
SHARED_TRACES = REPO.parent / "shared" / "data" / "traces"


@pytest.fixture(scope="session")
def trained_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model store holding a real walltime model trained on a slice of the bundled KTH trace."""
    from slurm_harp.cli import main

    store = tmp_path_factory.mktemp("store")
    code = main(["train", "--source", str(BUNDLED_TRACE), "--store", str(store), "--max-rows", "6000"])
    assert code == 0
    return store
