"""The reference model version (models/reference/, made by models/make_reference.py) still loads as
the daemon loads it and still predicts what it predicted when it was made."""

from __future__ import annotations

import json

import numpy as np

from slurm_harp.core.features import vectorize
from slurm_harp.core.request import JobRequest, Target
from slurm_harp.model.card import check_schema
from slurm_harp.server.reloader import reload_models
from tests.conftest import REPO

REFERENCE = REPO / "models" / "reference"


def test_it_loads_as_the_daemon_loads_it_and_matches_its_probe() -> None:
    result = reload_models(REFERENCE, {}, None)
    assert result.rejected == () and Target.TIME in result.models
    model = result.models[Target.TIME]
    probe = json.loads((REFERENCE / "probe.json").read_text())
    assert model.version == probe["version"]
    x = vectorize([JobRequest(**r) for r in probe["requests"]])
    assert sorted(f"{q:g}" for q in model.quantiles) == sorted(probe["predictions"])
    for quantile in model.quantiles:
        want = probe["predictions"][f"{quantile:g}"]
        np.testing.assert_allclose(model.predict_quantile(x, quantile), want, rtol=1e-6)


def test_its_card_passes_the_contract_and_it_stays_small() -> None:
    (card,) = REFERENCE.glob("time/*/card.json")
    check_schema(json.loads(card.read_text()))
    size = sum(f.stat().st_size for f in REFERENCE.rglob("*") if f.is_file())
    assert size < 1024 * 1024, f"models/reference is {size} bytes: keep the reference small"
