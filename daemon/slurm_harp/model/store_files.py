"""A model store's files, read only when they are the store's own regular files.

Whoever can write into the store must not make the daemon (often more privileged) read, log or hang
on a file outside it: a symbolic link to a secret, a FIFO, a device. So no link is followed to a card,
a model or CURRENT (``read_store_file``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from slurm_harp.regular_file import read_regular


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_store_file(path: Path) -> bytes:
    """The bytes of a regular file that is not a symbolic link. FileNotFoundError passes through;
    the rest is OSError."""
    return read_regular(path, follow_links=False)
