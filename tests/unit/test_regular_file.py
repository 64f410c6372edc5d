"""Reading only regular files: a FIFO, a socket, a device or a directory is refused at once, named."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.regular_file import (
    NotJSON,
    NotRegularFile,
    TooLarge,
    decode_json,
    read_json,
    read_regular,
    refuse_non_regular,
)
from tests.conftest import not_a_file


@pytest.mark.timeout(10)  # an open() that waits for a FIFO's writer fails the test, not hangs it
@pytest.mark.parametrize("kind", ["FIFO", "socket", "directory"])
def test_what_is_not_a_regular_file_is_refused_naming_path_and_kind(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "f"
    said = not_a_file(path, kind)
    for check in (read_regular, refuse_non_regular):
        with pytest.raises(NotRegularFile) as err:
            check(path)
        assert str(err.value) == f"{path} is {said}"
        assert err.value.strerror == said and err.value.filename == str(path)


def test_a_device_is_refused() -> None:
    with pytest.raises(NotRegularFile, match="/dev/null is a character device"):
        read_regular("/dev/null")


def test_regular_files_are_read_and_links_followed_unless_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    link = tmp_path / "link"
    link.symlink_to(path)
    refuse_non_regular(path)
    assert read_regular(link) == b"0123456789" and read_regular(path, size=4) == b"0123"
    with pytest.raises(NotRegularFile, match="link is a symbolic link"):
        read_regular(link, follow_links=False)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent")
    refuse_non_regular(tmp_path / "absent")  # nothing there: the opener says so its own way


def test_json_of_harp_s_own_files_is_read_up_to_a_size(tmp_path: Path) -> None:
    # The guard's state file and its extension file: a link, a larger file or other bytes are no such file.
    path = tmp_path / "f.json"
    path.write_text('{"format": 1}')
    assert read_json(path, 13) == {"format": 1}
    with pytest.raises(TooLarge, match=f"^{path}: larger than 12 bytes$"):
        read_json(path, 12)
    path.write_bytes(b"\xff{")
    with pytest.raises(NotJSON, match=f"^{path}: not JSON \\(") as err:
        read_json(path, 13)
    assert isinstance(err.value.reason, UnicodeDecodeError)
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(NotRegularFile, match="a symbolic link"):
        read_json(tmp_path / "link", 13)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"n": ' + b"9" * 5000 + b"}", "Exceeds the limit"),  # past int's 4300-digit conversion
        (b"[" * 100_000, "nested too deeply to read"),
        (b'{"jobs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested too deeply to read"),
    ],
)
def test_json_no_decoder_can_hold_is_not_json(tmp_path: Path, body: bytes, reason: str) -> None:
    # Before, these escaped read_json as ValueError / RecursionError: a corrupt guard state file
    # stopped `harp guard` at every start, and a nested extension file failed every re-read.
    path = tmp_path / "f.json"
    path.write_bytes(body)
    with pytest.raises(NotJSON, match=f"^{path}: not JSON \\(") as err:
        read_json(path, len(body))
    assert reason in str(err.value.reason)


@pytest.mark.parametrize("body", [b"NaN", b'{"q": Infinity}', b"[-Infinity]", b"1e999", b"[1.5, -2e400]"])
def test_non_finite_numbers_are_not_json_where_harp_writes_none(tmp_path: Path, body: bytes) -> None:
    """Python's parser reads NaN, Infinity and -Infinity (no JSON has them) and numbers past a
    float's range (as infinities): a card's NaN quantile then served every job an error. Where
    harp writes its files with allow_nan=False, they are refused; elsewhere read as before."""
    assert decode_json(body) is not None
    with pytest.raises(ValueError, match=r"is not a JSON number|is beyond a float's range"):
        decode_json(body, allow_nan=False)
    path = tmp_path / "note.json"
    path.write_bytes(body)
    with pytest.raises(NotJSON):
        read_json(path, 100, allow_nan=False)
    assert decode_json(b'{"q": 0.5, "n": -3, "e": 1e300}', allow_nan=False) == {"q": 0.5, "n": -3, "e": 1e300}
