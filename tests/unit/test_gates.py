"""The test suite's own gates (tests/conftest.py, tests/integration/lua_driver.py): where a tool the
tests need is missing they skip on a developer's machine, and fail in CI, where .ci/run sets
HARP_REQUIRE_CLUSTER=1 (and nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import lua51, required_tool
from tests.integration import lua_driver


@pytest.fixture
def no_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A PATH with nothing on it, and neither CI variable set."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("HARP_REQUIRE_CLUSTER", raising=False)
    return monkeypatch


def test_lua51_is_skipped_off_ci(no_tools: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match=r"lua5\.1 not installed"):
        lua51()


@pytest.mark.parametrize(("name", "value"), [("HARP_REQUIRE_CLUSTER", "1"), ("CI", "true")])
def test_lua51_is_required_in_ci(no_tools: pytest.MonkeyPatch, name: str, value: str) -> None:
    no_tools.setenv(name, value)
    with pytest.raises(RuntimeError, match=r"lua5\.1 is required in CI"):
        lua51()


def test_lua_driver_gate_is_required_in_ci(no_tools: pytest.MonkeyPatch) -> None:
    no_tools.setenv("HARP_REQUIRE_CLUSTER", "1")
    lua_driver.lua_or_skip.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"lua5\.1 is required in CI"):
            lua_driver.lua_or_skip()
    finally:
        lua_driver.lua_or_skip.cache_clear()


def test_required_tool_fails_in_ci(no_tools: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match="no-such-tool is not installed"):
        required_tool("no-such-tool", "no-such-package")
    no_tools.setenv("HARP_REQUIRE_CLUSTER", "1")
    with pytest.raises(pytest.fail.Exception, match="no-such-tool is not installed"):
        required_tool("no-such-tool", "no-such-package")
