"""What of harp.toml each service reads only at start: a SIGHUP re-reads the rest.

One home for the daemon's reload (server/daemon.py), the guard's (commands/guard.py) and
`harp check-config --start-only`, whose output deploy/ansible compares before and after writing a
new harp.toml to restart, rather than reload, a service whose part changed. Kept here, beside the
settings, so that check-config needs neither the server nor the guard to say it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slurm_harp.config.settings import Settings

# The daemon's sections: sockets, threads, the history feed, advice.
DAEMON_SECTIONS = ("server", "history", "advice")
# Of [guard], the daemon reads the heartbeat file and how old it may grow (a new path or age must
# reach the daemon and the guard together); a change of another guard key restarted the daemon.
DAEMON_GUARD_KEYS = ("heartbeat", "stale_seconds")
# The guard's [guard] keys: its metrics endpoint (it re-reads the rest of [guard] and history.db).
GUARD_KEYS = ("metrics_address", "metrics_port")


def daemon_part(settings: Settings) -> dict[str, Any]:
    """What of ``settings`` the daemon keeps until a restart, by name: ``[section]`` or ``guard.key``."""
    part: dict[str, Any] = {f"[{section}]": getattr(settings, section) for section in DAEMON_SECTIONS}
    return part | {f"guard.{key}": getattr(settings.guard, key) for key in DAEMON_GUARD_KEYS}


def keep_daemon_part(fresh: Settings, running: Settings) -> tuple[Settings, list[str]]:
    """``fresh`` with what the daemon keeps until a restart taken from ``running``, and the names
    (daemon_part's) of what ``fresh`` would have changed."""
    new, kept = daemon_part(fresh), daemon_part(running)
    changed = [name for name, value in kept.items() if new[name] != value]
    guard = replace(fresh.guard, **{key: getattr(running.guard, key) for key in DAEMON_GUARD_KEYS})
    sections = {section: getattr(running, section) for section in DAEMON_SECTIONS}
    return replace(fresh, guard=guard, **sections), changed


def guard_part(settings: Settings) -> tuple[object, ...]:
    """The [guard] values the guard keeps until a restart."""
    return tuple(getattr(settings.guard, key) for key in GUARD_KEYS)


def by_unit(settings: Settings) -> dict[str, str]:
    """Per systemd unit, what of ``settings`` it reads only at start, as comparable text."""
    return {
        "slurm-harp.service": repr(daemon_part(settings)),
        "slurm-harp-guard.service": repr(guard_part(settings)),
    }
