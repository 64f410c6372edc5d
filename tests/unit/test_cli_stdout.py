"""What `harp` makes of its standard output (cli): an OSError told as stdout's or not (the processes
with a stdout that cannot be written are in tests/integration/test_stdout_cli.py)."""

from __future__ import annotations

import pytest

from slurm_harp.cli import main
from slurm_harp.commands import importer


def test_an_oserror_not_of_stdout_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an error writing stdout is one line: any other OSError a command lets out is a bug."""

    def failing(_: object) -> int:
        raise PermissionError(13, "Permission denied", "/srv/x")

    monkeypatch.setattr(importer, "run", failing)
    with pytest.raises(PermissionError):
        main(["import", "a.swf"])
