"""harp.toml as a file (config.load) and its paths (config.reader Reader.optional_path): a byte order
mark is named, and a relative path is refused, naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_harp.config import ConfigError, load
from tests.unit.test_config import PATH_KEYS, refused_by_check_config


def test_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    """An editor's UTF-8 BOM: tomllib said only `Invalid statement (at line 1, column 1)`."""
    path = tmp_path / "harp.toml"
    path.write_bytes(b"\xef\xbb\xbf[policy]\nmode = 'shadow'\n")
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == (
        f"{path}: begins with a byte order mark (BOM, the bytes ef bb bf), which TOML does not allow: "
        "save it as UTF-8 without a BOM"
    )
    path.write_bytes(b"[policy]\nmode = 'shadow'\n")
    assert load(path).policy.default_mode == "shadow"


@pytest.mark.parametrize("key", PATH_KEYS)
@pytest.mark.parametrize("relative", ["models", "./run/harp.sock", "../x", "~/jobs.sqlite"])
def test_a_relative_path_is_refused_by_check_config_naming_its_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, key: str, relative: str
) -> None:
    """A service runs from / (read-only under ProtectSystem=strict), check-config from where it is
    run: a relative path passed check-config and named another file, or none, for the service."""
    section, name = key.split(".")
    path, line = refused_by_check_config(tmp_path, caplog, f'[{section}]\n{name} = "{relative}"\n')
    assert line == (
        f"{path}: {key}: must be an absolute path (a relative one would be found from the working "
        f"directory, / for a service), got {relative!r}"
    )


@pytest.mark.parametrize("key", PATH_KEYS)
def test_an_absolute_path_is_read(tmp_path: Path, key: str) -> None:
    section, name = key.split(".")
    path = tmp_path / "harp.toml"
    path.write_text(f'[{section}]\n{name} = "/srv/harp/{name}"\n')
    settings = load(path)
    value = {
        "store.path": settings.store,
        "server.socket": settings.server.socket,
        "guard.heartbeat": settings.guard.heartbeat,
        "guard.state": settings.guard.state,
        "history.db": settings.history.db,
        "advice.socket": settings.advice.socket,
    }[key]
    assert value == Path(f"/srv/harp/{name}")
