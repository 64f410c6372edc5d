"""HARP's regressors have one home (learning.sklearn_models): `harp evaluate`'s HARP-style baseline
fits the very models `harp train`'s family fits."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from slurm_harp.core.features import vectorize
from slurm_harp.core.request import Target
from slurm_harp.evaluation.harpstyle import HarpStyleStrategy
from slurm_harp.evaluation.observed import observe
from slurm_harp.evaluation.split import chronological_split, known_before
from slurm_harp.learning import sklearn_models
from tests.conftest import REPO
from tests.unit.test_baselines import synthetic


def _plain(params: dict[str, object]) -> dict[str, str]:
    """get_params(deep=True) without the estimator objects, which compare by identity, as text
    (NaN, the imputer's missing value, is not equal to itself)."""
    return {k: repr(v) for k, v in params.items() if not hasattr(v, "get_params") and k != "steps"}


# 200 jobs: over EARLY_STOPPING_ROWS known training jobs, the MLP stops early; 150: under, it does not.
@pytest.mark.parametrize("jobs", [200, 150])
@pytest.mark.parametrize("kind", sklearn_models.KINDS)
def test_the_harp_style_baseline_fits_the_familys_model(kind: sklearn_models.Kind, jobs: int) -> None:
    timeline = chronological_split(synthetic(2000, seed=4).jobs[:jobs])
    strategy = HarpStyleStrategy(Target.TIME, kind)
    strategy.fit(timeline.jobs, timeline.split, 0.01)
    train = [timeline.jobs[i] for i in known_before(timeline.jobs, timeline.split.train_end)]
    x = vectorize([job.request for job in train])
    same = sklearn_models.fit(kind, x, np.log(observe(train, Target.TIME).actual), 0)
    fitted = strategy._model
    assert [name for name, _ in fitted.steps] == [name for name, _ in same.steps]
    assert _plain(fitted.get_params()) == _plain(same.get_params())
    probe = vectorize([job.request for job in timeline.jobs[timeline.split.train_end :]])
    np.testing.assert_array_equal(fitted.predict(probe), same.predict(probe))
    assert (len(train) >= 100) == (jobs == 200)  # the two sides of EARLY_STOPPING_ROWS


def test_the_mlp_stops_early_only_with_rows_to_spare() -> None:
    mlp = sklearn_models.build("mlp", sklearn_models.EARLY_STOPPING_ROWS, 0)[-1]
    assert mlp.early_stopping and mlp.max_iter == sklearn_models.MLP_MAX_ITER
    assert not sklearn_models.build("mlp", sklearn_models.EARLY_STOPPING_ROWS - 1, 0)[-1].early_stopping


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="forest"):
        sklearn_models.build("forest", 500, 0)


def test_the_baselines_import_neither_lightgbm_nor_onnx() -> None:
    """lineup loads the HARP-style baseline, and with it this module, for every `harp evaluate`."""
    code = (
        "import sys, slurm_harp.evaluation.lineup; "
        "print(sorted(m for m in ('lightgbm', 'onnxruntime', 'sklearn') if m in sys.modules))"
    )
    env = os.environ | {"PYTHONPATH": f"{REPO / 'daemon'}:{REPO}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"
