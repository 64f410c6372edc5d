"""A model store's files, read only when they are the store's own regular files.

Whoever can write into the store must not make the daemon (often more privileged) read, log or hang
on a file outside it: a symbolic link to a secret, a FIFO, a device. So no link is followed to a
version, a target's directory, a card, a model or CURRENT (``linked``, ``read_note``, ``read_current``,
``read_model``), and none of them is read past a size harp never writes: a card or verdict
(``read_note``), CURRENT (``read_current``), a model file of another size than its card says
(``read_model``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from slurm_harp.regular_file import TooLarge, open_regular, read_capped, read_json

# The most a card.json or promotion.json may hold: the reference card is 15 KiB. Read whole, a card
# of hundreds of MB (a valid card with an extra key of padding) ran the daemon out of memory while
# it held the reload lock; one past this is refused, naming its size.
MAX_NOTE_BYTES = 4 * 1024 * 1024
# The most a CURRENT may hold: harp writes a version name and a newline, 24 bytes. It is read at
# every store poll: one of 1 GiB (a bad restore) held the GIL for seconds, past the plugin's deadline,
# and grew the daemon by 2 GiB every 30 s.
MAX_CURRENT_BYTES = 256
# The most a model file may hold when its card gives no size (harp's cards always do; its models
# are tens of KiB): read whole before its checksum, a 2 GiB file added 2 GiB at each reload attempt.
MAX_MODEL_BYTES = 256 * 1024 * 1024


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


def read_current(path: Path) -> bytes:
    """The bytes of a CURRENT that is a regular file, no link followed: FileNotFoundError passes
    through, TooLarge past MAX_CURRENT_BYTES (no more is read), OSError for the rest."""
    try:
        return read_capped(path, MAX_CURRENT_BYTES)
    except TooLarge as exc:
        raise TooLarge(f"{exc}: not a CURRENT harp writes") from None


class WrongSize(ValueError):
    """A model file whose size is not its card's (or past MAX_MODEL_BYTES where the card says none)."""


def read_model(path: Path, size: int | None) -> bytes:
    """The bytes of a model file that is a regular file, no link followed, whose card says it holds
    ``size`` bytes (None: says nothing). WrongSize, naming both sizes, when its fstat says another
    size (or one past MAX_MODEL_BYTES): refused before a byte is read. OSError for the rest."""
    with open_regular(path, follow_links=False) as (handle, st):
        if size is None and st.st_size > MAX_MODEL_BYTES:
            raise WrongSize(
                f"{path}: {st.st_size} bytes, past {MAX_MODEL_BYTES} read where the card gives no "
                "size: not read"
            )
        if size is not None and st.st_size != size:
            raise WrongSize(f"{path}: {st.st_size} bytes, the card says {size}: not read")
        # Its fstat size, not the cap: read(n) sets n bytes aside first (256 MiB of address space for
        # a file of kilobytes, a MemoryError under LimitAS=). Grown since: bounded, its sha256 differs.
        return handle.read((st.st_size if size is None else size) + 1)
