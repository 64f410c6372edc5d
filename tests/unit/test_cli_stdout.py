"""What `harp` makes of its standard output (cli): names that are not UTF-8 printed escaped under any
locale, and an OSError told as stdout's or not (the processes with a stdout that cannot be written
are in tests/integration/test_stdout_cli.py)."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from slurm_harp.cli import main
from slurm_harp.commands import importer
from tests.unit.test_sacct import SACCT_TEXT


def test_a_name_not_utf8_is_escaped_under_a_c_locale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under C, C.UTF-8 or POSIX, Python's stdout writes a surrogate back as its raw byte
    ("surrogateescape"), and only a "strict" stdout was made to escape: the byte reached the
    terminal, not the ``\\udcff`` logging prints."""
    odd = tmp_path / os.fsdecode(b"\xff.txt")
    odd.write_text(SACCT_TEXT)
    stdout = io.TextIOWrapper(io.BytesIO(), "utf-8", errors="surrogateescape")
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["import", "--db", str(tmp_path / "jobs.sqlite"), str(odd)]) == 0
    stdout.flush()
    printed = stdout.buffer.getvalue()  # type: ignore[attr-defined]
    assert b"\\udcff.txt -> ?: 18 lines" in printed and b"\xff" not in printed


def test_an_oserror_not_of_stdout_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an error writing stdout is one line: any other OSError a command lets out is a bug."""

    def failing(_: object) -> int:
        raise PermissionError(13, "Permission denied", "/srv/x")

    monkeypatch.setattr(importer, "run", failing)
    with pytest.raises(PermissionError):
        main(["import", "a.swf"])
