"""What a dead advice process leaves beside the advice socket: the socket, when nothing answers on
it, and its relay's private directories (``.harp-advice-*``). A child that exits in order removes
both; one killed (by the daemon when it hung, by the OOM killer) cannot. The next child claims the
socket anyway; the directories would pile up, one at every such death."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from pathlib import Path

from slurm_harp.server.socket_path import RELAY_DIR_PREFIX, RELAY_SOCKET, listening

# A private directory younger than this may be a live relay's between its mkdtemp and its bind.
SETTLED_S = 10.0


def answered(sock: Path) -> bool:
    """Whether a process listens on ``sock`` (anything but a refused or missing path counts)."""
    try:
        return listening(sock)
    except OSError:
        return True  # cannot tell: leave it


def remove_dead(sock: Path) -> None:
    """Remove the advice socket ``sock`` if nothing answers on it, and every private directory
    beside it that is this user's, older than SETTLED_S, and whose relay socket nothing answers on
    (a live daemon's, on another advice socket in the same directory, is left: also one whose relay
    has made its directory and not yet bound its socket in it)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(sock.lstat().st_mode) and not answered(sock):
            sock.unlink()
    with contextlib.suppress(OSError):
        for private in sock.parent.glob(f"{RELAY_DIR_PREFIX}*"):
            with contextlib.suppress(OSError):
                st = private.lstat()
                ours = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
                settled = time.time() - st.st_mtime >= SETTLED_S
                if ours and settled and not answered(private / RELAY_SOCKET):
                    shutil.rmtree(private, ignore_errors=True)
