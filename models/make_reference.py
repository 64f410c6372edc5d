"""Regenerate the reference model version in models/reference/ from the bundled KTH-SP2 trace.

    .venv/bin/python models/make_reference.py

A small store (walltime only: the trace records nothing else) trained as `harp train` trains, on the
jobs `harp demo` trains on (the first 80 %), with few trees so that it stays well under a megabyte:
`harp demo --store models/reference` replays the later jobs through it. Beside it, probe.json:
requests from the end of the trace and each quantile model's prediction for them, as the daemon's
loader computed them when the version was made. tests/unit/test_reference_model.py loads the store
as the daemon does and recomputes the probe: a change to the features, the card contract or the
runtime that would break a published model shows there. Run this again after such a change (a new
feature list makes every old model unusable).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference"
TRACE = HERE.parent / "daemon" / "slurm_harp" / "data" / "KTH-SP2-1996-2.1-cln.swf.gz"
# Few trees on the most recent training jobs: each quantile model's ONNX file stays small.
TREES, LEARNING_RATE, MAX_ROWS, HOLDOUT = 25, 0.2, 8000, 0.2
PROBE_JOBS = 24


def probe(store: Path) -> dict[str, object]:
    """Requests (request features only: no history) and each quantile's prediction, in minutes."""
    from slurm_harp.accounting.swf import read_swf
    from slurm_harp.core.features import vectorize
    from slurm_harp.core.request import Target
    from slurm_harp.server.reloader import reload_models

    result = reload_models(store, {}, None)
    if result.rejected or Target.TIME not in result.models:
        raise SystemExit(f"the new reference model does not load: {result.rejected}")
    model = result.models[Target.TIME]
    requests = [r.request for r in read_swf(TRACE)[-PROBE_JOBS:]]
    x = vectorize(requests)
    predicted = {q: model.predict_quantile(x, q) for q in model.quantiles}
    return {
        "version": model.version,
        "requests": [{k: v for k, v in asdict(r).items() if v is not None} for r in requests],
        "predictions": {f"{q:g}": [float(v) for v in values] for q, values in predicted.items()},
    }


def main() -> int:
    from slurm_harp.commands.demo import split_trace
    from slurm_harp.core.request import Target
    from slurm_harp.learning.family import FamilyConfig
    from slurm_harp.learning.fitting import MethodConfig
    from slurm_harp.learning.trainer import train_target
    from slurm_harp.model.store import ModelStore

    # The demo's own training jobs (`harp demo --store models/reference` replays the rest).
    _, past, _ = split_trace(TRACE, HOLDOUT)
    config = MethodConfig(family=FamilyConfig().boosted(TREES, LEARNING_RATE))
    result = train_target(past[-MAX_ROWS:], Target.TIME, config, source=TRACE.name)
    with tempfile.TemporaryDirectory(dir=HERE) as tmp:
        store = Path(tmp) / "reference"
        ModelStore(store).publish(Target.TIME, result.files, result.card)
        (store / "probe.json").write_text(json.dumps(probe(store), indent=1) + "\n")
        shutil.rmtree(REFERENCE, ignore_errors=True)
        shutil.move(str(store), REFERENCE)
    size = sum(f.stat().st_size for f in REFERENCE.rglob("*") if f.is_file())
    print(f"{REFERENCE}: {size / 1024:.0f} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
