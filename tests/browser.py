"""A real browser for pages slurm-harp writes: Debian's chromium, headless, on a closed network.

Each run gets a fresh empty profile and every background service switched off, so that nothing is
fetched and no earlier run leaves state behind.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",  # root in CI containers: chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def _run(binary: str, page: Path, extra: list[str], timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="harp-chromium-") as profile:
        argv = [binary, *FLAGS, f"--user-data-dir={profile}", *extra, page.resolve().as_uri()]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def dump_dom(binary: str, page: Path, timeout: float = 120.0) -> str:
    """The DOM of ``page`` after chromium has loaded and rendered it, as HTML."""
    return _run(binary, page, ["--dump-dom"], timeout)


def screenshot(
    binary: str, page: Path, out: Path, size: tuple[int, int] = (1280, 2000), timeout: float = 120.0
) -> Path:
    """A PNG of the first ``size`` (width, height) pixels of ``page`` as chromium draws it."""
    _run(binary, page, [f"--screenshot={out.resolve()}", f"--window-size={size[0]},{size[1]}"], timeout)
    if not out.is_file():
        raise RuntimeError(f"chromium wrote no screenshot at {out}")
    return out
