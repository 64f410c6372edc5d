"""A model store's files, read only when they are the store's own regular files.

Whoever can write into the store must not make the daemon (often more privileged) read, log or hang
on a file outside it: a symbolic link to a secret, a FIFO, a device. So no link is followed to a
version, a target's directory, a card, a model or CURRENT (``linked``, ``read_store_file``), and a
card or verdict is read only up to a size no card harp writes comes near (``read_note``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from slurm_harp.regular_file import read_json, read_regular

# The most a card.json or promotion.json may hold: the reference card is 15 KiB. Read whole, a card
# of hundreds of MB (a valid card with an extra key of padding) ran the daemon out of memory while
# it held the reload lock; one past this is refused, naming its size.
MAX_NOTE_BYTES = 4 * 1024 * 1024


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def linked(target_dir: Path, version: str | None = None) -> Path | None:
    """Whichever of a target's directory and its entry ``version`` is a symbolic link (lstat: none
    is followed to learn it), or None. The store serves only its own files: a version or target
    directory linked elsewhere is no version, for the daemon, promotion or `harp rollback`. The
    root may be a link (a site keeps its models on another disk)."""
    parts = (target_dir,) if version is None else (target_dir, target_dir / version)
    return next((part for part in parts if part.is_symlink()), None)


def refuse_links(target_dir: Path, version: str | None = None) -> None:
    """ValueError naming the link when ``linked`` finds one."""
    link = linked(target_dir, version)
    if link is not None:
        raise ValueError(f"{link} is a symbolic link: the store serves only its own files")


def read_note(path: Path) -> Any:
    """The JSON of a card or verdict (promotion.json): read_json's, no link followed, TooLarge past
    MAX_NOTE_BYTES, NotJSON for a NaN or an infinity too (harp writes neither; a card's NaN
    quantile served every job a KeyError)."""
    return read_json(path, MAX_NOTE_BYTES, allow_nan=False)


def read_store_file(path: Path) -> bytes:
    """The bytes of a regular file that is not a symbolic link. FileNotFoundError passes through;
    the rest is OSError."""
    return read_regular(path, follow_links=False)
