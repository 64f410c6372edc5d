from __future__ import annotations

from pathlib import Path

import slurm_harp.api
from slurm_harp.api.protogen import OUTPUTS, generate


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    """Fails when proto/ was edited without re-running `python -m slurm_harp.api.protogen`."""
    generate(tmp_path)
    committed = Path(slurm_harp.api.__file__).parent
    for name in OUTPUTS:
        assert (tmp_path / name).read_text() == (committed / name).read_text(), f"{name} is stale"
