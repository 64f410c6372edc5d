"""What of harp.toml each service reads only at start: a SIGHUP re-reads the rest.

One home for the daemon's reload (server/daemon.py), the guard's (commands/guard.py) and
`harp check-config --start-only`, whose output deploy/ansible compares before and after writing a
new harp.toml to restart, rather than reload, a service whose part changed. Kept here, beside the
settings, so that check-config needs neither the server nor the guard to say it.
"""

from __future__ import annotations

from typing import Any

from slurm_harp.config.settings import Settings

# The daemon's sections: sockets, threads, the history feed, the guard's heartbeat, advice.
DAEMON_SECTIONS = ("server", "history", "guard", "advice")
# The guard's [guard] keys: its metrics endpoint (it re-reads the rest of [guard] and history.db).
GUARD_KEYS = ("metrics_address", "metrics_port")


def daemon_part(settings: Settings) -> dict[str, Any]:
    """The sections of ``settings`` the daemon keeps until a restart, by name."""
    return {section: getattr(settings, section) for section in DAEMON_SECTIONS}


def guard_part(settings: Settings) -> tuple[object, ...]:
    """The [guard] values the guard keeps until a restart."""
    return tuple(getattr(settings.guard, key) for key in GUARD_KEYS)


def by_unit(settings: Settings) -> dict[str, str]:
    """Per systemd unit, what of ``settings`` it reads only at start, as comparable text."""
    return {
        "slurm-harp.service": repr(tuple(daemon_part(settings).values())),
        "slurm-harp-guard.service": repr(guard_part(settings)),
    }
