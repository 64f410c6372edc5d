"""What only the host can say of a harp.toml that parses: the names it gives exist here.

Kept out of ``parse`` so that a file can be read (tests, `harp nightly`) where the daemon does not
run; `harp check-config` and `harp serve` check it, and the daemon resolves the group through it.
"""

from __future__ import annotations

import grp

from slurm_harp.config.settings import ConfigError, Settings


def socket_gid(settings: Settings) -> int | None:
    """The gid of ``server.socket_group`` (None when unset); ConfigError naming the key and the
    group when this host has no such group."""
    name = settings.server.socket_group
    if name is None:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        source = settings.source or "<config>"
        raise ConfigError(f"{source}: server.socket_group: no group {name!r} on this host") from None


def check_host(settings: Settings) -> None:
    """ConfigError when ``settings`` name something this host lacks (the key is in the message)."""
    socket_gid(settings)
